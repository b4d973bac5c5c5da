package dbx

import "testing"

func TestCheckRows(t *testing.T) {
	t.Parallel()
	if err := CheckRows(0); err != ErrVersionConflict {
		t.Errorf("CheckRows(0) = %v, want ErrVersionConflict", err)
	}
	if err := CheckRows(1); err != nil {
		t.Errorf("CheckRows(1) = %v, want nil", err)
	}
}
