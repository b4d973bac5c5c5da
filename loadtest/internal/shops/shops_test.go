package shops

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// The module root the harness builds the shop in and reads deploy/ from is
// this repository's.
func TestModuleRoot(t *testing.T) {
	root, err := ModuleRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "deploy", "nginx.conf")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
}
