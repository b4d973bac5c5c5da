//go:build !linux

package topo

import (
	"context"
	"errors"
	"os/exec"
)

// Netns is a network namespace of one process: Linux only.
type Netns struct {
	Name   string
	HostIP string
	NsIP   string
}

// CutMode is how the kernel cuts a path.
type CutMode string

// The kernel's cuts.
const (
	Drop   CutMode = "drop"
	Reject CutMode = "reject"
)

var errNoNetns = errors.New("network namespaces are Linux only")

// NetnsSupported says why namespaces cannot be made here.
func NetnsSupported() error { return errNoNetns }

// NewNetns fails outside Linux.
func NewNetns(context.Context) (*Netns, error) { return nil, errNoNetns }

// Command is not available outside Linux.
func (n *Netns) Command(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }

// Cut fails outside Linux.
func (n *Netns) Cut(context.Context, string, CutMode) error { return errNoNetns }

// Heal has nothing to heal outside Linux.
func (n *Netns) Heal(context.Context) error { return nil }

// Close has nothing to close outside Linux.
func (n *Netns) Close() {}
