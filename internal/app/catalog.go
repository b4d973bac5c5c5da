package app

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/payment"
)

// demoProducts is the demo catalog: one flash-sale item with little stock,
// so a few clicks sell it out, and regular items, one dearer than a demo
// wallet holds, so the page can show a payment refused for want of funds.
var demoProducts = []struct {
	name         string
	price, stock int64
	flashSale    bool
}{
	{"Flash sale: mechanical keyboard", 4900, 5, true},
	{"Noise-cancelling headphones", 19900, 20, false},
	{"Coffee beans, 1 kg", 1850, 200, false},
	{"USB-C cable", 990, 500, false},
}

// Demo users 1..demoUsers start with demoCredit cents in their wallets.
const (
	demoUsers  = 20
	demoCredit = 10000
	demoWho    = "demo-catalog" // the principal of the catalog's refs: no API caller is named so
)

// seedDemoCatalog creates the demo catalog through the shop's own code paths
// (product rows with their create ledger rows, wallet credits with their
// ledger rows), so the audit sees an ordinary shop. Every product and credit
// carries a fixed idempotency ref: a restart, or two instances starting at
// once, create nothing twice.
func seedDemoCatalog(ctx context.Context, svc *services, log *slog.Logger) error {
	made := 0
	for i, p := range demoProducts {
		ref := idem.Ref("P", demoWho, strconv.Itoa(i+1))
		_, created, err := svc.products.Create(ctx, p.name, p.price, p.stock, p.flashSale, ref, "")
		if err != nil {
			return fmt.Errorf("demo catalog: product %q: %w", p.name, err)
		}
		if created {
			made++
		}
	}
	credited := 0
	for u := int64(1); u <= demoUsers; u++ {
		_, replayed, err := svc.payments.Credit(ctx, u, demoCredit, payment.CreditRef(demoWho, u, "welcome"), "")
		if err != nil {
			return fmt.Errorf("demo catalog: credit of user %d: %w", u, err)
		}
		if !replayed {
			credited++
		}
	}
	if made > 0 || credited > 0 {
		log.Info("demo catalog created", "products", made, "wallets_credited", credited, "credit_cents", demoCredit,
			"users", fmt.Sprintf("1-%d", demoUsers), "setting", "SHOP_DEMO_CATALOG")
	} else {
		log.Info("demo catalog already there", "products", len(demoProducts), "users", fmt.Sprintf("1-%d", demoUsers))
	}
	return nil
}
