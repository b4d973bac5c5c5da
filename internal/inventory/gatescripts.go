package inventory

import (
	_ "embed" // the gate's Lua scripts

	"github.com/redis/go-redis/v9"
)

// The gate's scripts, in lua/: each is gate_lib.lua followed by its own
// body, and says its KEYS and ARGV at its top.
var (
	//go:embed lua/gate_lib.lua
	gateLib string
	//go:embed lua/gate_take.lua
	gateTakeLua string
	//go:embed lua/gate_settle.lua
	gateSettleLua string
	//go:embed lua/gate_level.lua
	gateLevelLua string
	//go:embed lua/gate_give.lua
	gateGiveLua string
	//go:embed lua/gate_expired.lua
	gateExpiredLua string
	//go:embed lua/gate_reap.lua
	gateReapLua string

	gateTake        = redis.NewScript(gateLib + gateTakeLua)
	gateSettle      = redis.NewScript(gateLib + gateSettleLua)
	gateLevelScript = redis.NewScript(gateLib + gateLevelLua)
	gateGive        = redis.NewScript(gateGiveLua)
	gateExpired     = redis.NewScript(gateLib + gateExpiredLua)
	gateReap        = redis.NewScript(gateLib + gateReapLua)
)
