//go:build !linux

package shops

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
