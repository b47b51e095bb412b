package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfiles starts the CPU profile of --cpu-profile and returns the
// function, called at exit, that stops it and writes the allocation
// profile of --mem-profile. They let the process be profiled under the
// load of a benchmark (docs/benchmarks.md), where a test binary would
// profile the client too.
func startProfiles(cpuFile, memFile string) (stop func() error, err error) {
	var cpu *os.File
	if cpuFile != "" {
		if cpu, err = os.Create(cpuFile); err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			_ = cpu.Close()
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		if memFile != "" {
			errs = append(errs, writeAllocs(memFile))
		}
		return errors.Join(errs...)
	}, nil
}

// writeAllocs writes the allocations made since the start, sampled at the
// runtime's default rate, to name.
func writeAllocs(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("allocation profile: %w", err)
	}
	runtime.GC() // the profile counts up to the last collection
	err = pprof.Lookup("allocs").WriteTo(f, 0)
	return errors.Join(err, f.Close())
}
