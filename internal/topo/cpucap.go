package topo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupCPU is where the cgroup v1 cpu controller is mounted.
const cgroupCPU = "/sys/fs/cgroup/cpu"

// cfsPeriod is the CFS period the caps use, in microseconds.
const cfsPeriod = 100_000

// CPUCap is a cgroup (v1, cpu controller) that holds processes to a fixed
// share of the machine's CPU time, as if each ran on a host of its own with
// that many cores: the bench's instances with cores of their own. It needs
// root and a writable /sys/fs/cgroup/cpu.
type CPUCap struct {
	dir string
}

// NewCPUCap makes a cgroup called name whose processes together get at
// most cpus CPUs (cpu.cfs_quota_us = cpus x cpu.cfs_period_us).
func NewCPUCap(name string, cpus float64) (*CPUCap, error) {
	if cpus <= 0 {
		return nil, errors.New("topo: a CPU cap must be above 0")
	}
	dir := filepath.Join(cgroupCPU, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("topo: a CPU cap needs root and the cgroup v1 cpu controller at %s: %w", cgroupCPU, err)
	}
	c := &CPUCap{dir: dir}
	if err := c.write("cpu.cfs_period_us", cfsPeriod); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.write("cpu.cfs_quota_us", int64(cpus*cfsPeriod)); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *CPUCap) write(file string, v int64) error {
	if err := os.WriteFile(filepath.Join(c.dir, file), []byte(strconv.FormatInt(v, 10)), 0o644); err != nil {
		return fmt.Errorf("topo: CPU cap %s: %w", file, err)
	}
	return nil
}

// Add moves process pid (all its threads) into the cgroup.
func (c *CPUCap) Add(pid int) error {
	return c.write("cgroup.procs", int64(pid))
}

// Quota reads the cap back: quota and period in microseconds, and the CPUs
// they make.
func (c *CPUCap) Quota() (quota, period int64, cpus float64, err error) {
	read := func(file string) (int64, error) {
		b, err := os.ReadFile(filepath.Join(c.dir, file))
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	if quota, err = read("cpu.cfs_quota_us"); err != nil {
		return 0, 0, 0, err
	}
	if period, err = read("cpu.cfs_period_us"); err != nil {
		return 0, 0, 0, err
	}
	return quota, period, float64(quota) / float64(period), nil
}

// Close moves any process left in the cgroup back to the root one and
// removes the cgroup.
func (c *CPUCap) Close() {
	if b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs")); err == nil {
		for _, pid := range strings.Fields(string(b)) {
			_ = os.WriteFile(filepath.Join(cgroupCPU, "cgroup.procs"), []byte(pid), 0o644)
		}
	}
	_ = os.Remove(c.dir)
}
