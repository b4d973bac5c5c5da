//go:build !linux

package redistopo

import "syscall"

// childAttr: no parent-death signal outside Linux; Close still kills every server.
func childAttr() *syscall.SysProcAttr { return nil }
