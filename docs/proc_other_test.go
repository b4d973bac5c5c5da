//go:build unix && !linux

package docs

import "syscall"

func dieWithTest(a *syscall.SysProcAttr) *syscall.SysProcAttr { return a }
