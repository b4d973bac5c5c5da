//go:build !linux

package topo

import "syscall"

// childAttr: no parent-death signal outside Linux; Close still kills every server.
func childAttr() *syscall.SysProcAttr { return nil }
