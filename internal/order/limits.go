package order

import (
	"errors"
	"strconv"

	"github.com/seckill-lab/shop/internal/idem"
)

// ErrUnpaidLimit: the order would take the user's unpaid units above the
// configured cap (Config.UnpaidLimit, checked in the batch); nothing was
// changed.
var ErrUnpaidLimit = errors.New("too many unpaid units held; pay or cancel pending orders first")

// SeckillNo is the order number of userID's one seckill order for productID.
func SeckillNo(userID, productID int64) string {
	return idem.Ref("S", strconv.FormatInt(userID, 10), strconv.FormatInt(productID, 10))
}

// RegularNo is the order number of userID's regular order under a business
// key (see Regular).
func RegularNo(userID int64, key string) string {
	return idem.Ref("R", strconv.FormatInt(userID, 10), key)
}
