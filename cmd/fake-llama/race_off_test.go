//go:build !race

package main

// raceBuild makes TestMain build the fake with -race when the tests run with -race.
const raceBuild = false
