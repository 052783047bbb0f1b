//go:build race

package config

// raceEnabled thins the crash test under -race, where each child run is
// several times slower; the full sweep runs in the normal test pass.
const raceEnabled = true
