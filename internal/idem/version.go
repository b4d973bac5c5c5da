package idem

import "errors"

// ErrVersionConflict means an optimistic update matched no row: someone
// else changed the row since it was read (or it is gone). Re-read and
// decide again; do not blindly retry the same write.
var ErrVersionConflict = errors.New("idem: version conflict")

// CheckRows turns the affected-row count of an optimistic update into an
// error. The pattern, safe to run twice because the second run matches
// nothing:
//
//	UPDATE account SET balance = balance - 100, version = version + 1
//	WHERE id = ? AND version = ?
//
// With gorm: CheckRows(db.Model(&a).Where("id = ? AND version = ?", a.ID,
// a.Version).Updates(...).RowsAffected), after checking the Error. The
// version must change on every update, so MySQL's "rows changed" count is
// the "rows matched" count.
func CheckRows(rows int64) error {
	if rows == 0 {
		return ErrVersionConflict
	}
	return nil
}

// Versioned is CheckRows for a database/sql Result.
func Versioned(res interface{ RowsAffected() (int64, error) }) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	return CheckRows(n)
}
