package cli

import (
	"testing"
	"time"
)

func TestFormatSessionDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                    "0s",
		0:                               "0s",
		59 * time.Second:                "59s",
		time.Minute:                     "1m",
		59*time.Minute + 59*time.Second: "59m",
		time.Hour:                       "1h 0m",
		3*time.Hour + 5*time.Minute:     "3h 5m",
		23*time.Hour + 59*time.Minute:   "23h 59m",
		24 * time.Hour:                  "1d",
		50*24*time.Hour + 23*time.Hour:  "50d",
	} {
		if got := FormatSessionDuration(d); got != want {
			t.Errorf("%v: got %q, want %q", d, got, want)
		}
	}
}
