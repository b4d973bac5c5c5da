//go:build !linux

package topo

import (
	"os"
	"syscall"
)

// childAttr: no parent-death signal outside Linux; Close still kills every server.
func childAttr() *syscall.SysProcAttr { return nil }

// userAttr: outside Linux the servers run as we do.
func userAttr(uid, gid uint32) *syscall.SysProcAttr { return nil }

// ownGroup: outside Linux the servers stay in our process group.
func ownGroup(a *syscall.SysProcAttr) *syscall.SysProcAttr { return a }

// killGroup: outside Linux, the process alone.
func killGroup(p *os.Process) error { return p.Kill() }
