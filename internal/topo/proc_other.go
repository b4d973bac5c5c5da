//go:build !linux

package topo

import "syscall"

// childAttr: no parent-death signal outside Linux; Close still kills every server.
func childAttr() *syscall.SysProcAttr { return nil }

// userAttr: outside Linux the servers run as we do.
func userAttr(uid, gid uint32) *syscall.SysProcAttr { return nil }
