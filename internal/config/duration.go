package config

import (
	"fmt"
	"time"
)

// Day is the "d" of a duration: 24 hours.
const Day = 24 * time.Hour

// tooLong stands for any duration over maxDuration, which ParseDuration
// refuses as such.
const tooLong = maxDuration + time.Second

// parseUnits reads a duration written as concatenated <n><unit> parts,
// unit one of s, m, h and d ("2h30m", "3d", "1d12h"), or anything
// time.ParseDuration reads ("1.5h", "300ms"); one over maxDuration
// comes back as tooLong, for the caller to refuse.
func parseUnits(s string) (time.Duration, error) {
	d, ok, err := parseWholeUnits(s)
	if ok {
		return d, err
	}
	return time.ParseDuration(s)
}

// parseWholeUnits reads s when it is made of <digits><s|m|h|d> parts
// only; ok is false when it is not (time.ParseDuration may read it).
func parseWholeUnits(s string) (d time.Duration, ok bool, err error) {
	if s == "" {
		return 0, false, nil
	}
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j == i || j == len(s) {
			return 0, false, nil
		}
		var unit time.Duration
		switch s[j] {
		case 's':
			unit = time.Second
		case 'm':
			unit = time.Minute
			if j+1 < len(s) && s[j+1] == 's' { // "ms": time.ParseDuration's
				return 0, false, nil
			}
		case 'h':
			unit = time.Hour
		case 'd':
			unit = Day
		default:
			return 0, false, nil
		}
		if j-i > 10 {
			return tooLong, true, nil
		}
		var n int64
		for _, c := range s[i:j] {
			n = n*10 + int64(c-'0')
		}
		if n > int64(maxDuration/unit) {
			return tooLong, true, nil
		}
		if d += time.Duration(n) * unit; d > maxDuration {
			return tooLong, true, nil
		}
		i = j + 1
	}
	return d, true, nil
}

// ParseTTL reads how long a persistent sandbox may live: a duration as
// ParseDuration reads it ("30m", "2h30m", "3d", or a bare number of
// seconds), longer than zero.
func ParseTTL(s string) (time.Duration, error) {
	d, err := ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("a TTL must be longer than zero, got %q (leave it out for a sandbox that never expires)", s)
	}
	return d, nil
}
