//go:build !race

package faketest

// race makes Build build the fake with -race when the tests run with -race.
const race = false
