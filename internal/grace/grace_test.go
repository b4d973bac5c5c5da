package grace

import "testing"

// TestBudgetFitsA1: the shares past the deadline nest and add up to less
// than A1's second, so no answer can leave later than A1 allows.
func TestBudgetFitsA1(t *testing.T) {
	if Commit > InDoubt || InDoubt > Hold {
		t.Errorf("the transaction (%v) and its look-up (%v) must end within the hold (%v)", Commit, InDoubt, Hold)
	}
	if Hold+Keep >= A1 {
		t.Errorf("hold %v + keep %v = %v: not inside A1's %v", Hold, Keep, Hold+Keep, A1)
	}
}
