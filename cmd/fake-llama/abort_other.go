//go:build !linux

package main

import "os"

// dieOfSIGABRT exits 134, the status a shell reports for SIGABRT.
func dieOfSIGABRT() { os.Exit(134) }
