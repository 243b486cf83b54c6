package cli

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// Time defines a flag of a point in time: RFC 3339, or YYYY-MM-DD (00:00
// UTC). A malformed value is refused while the flags are parsed; a flag
// not given is the zero time.
func Time(fs *pflag.FlagSet, name, usage string) *time.Time {
	v := new(timeValue)
	fs.Var(v, name, usage)
	return &v.t
}

type timeValue struct{ t time.Time }

func (v *timeValue) Type() string { return "time" }

func (v *timeValue) String() string {
	if v.t.IsZero() {
		return ""
	}
	return v.t.Format(time.RFC3339)
}

func (v *timeValue) Set(s string) error {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		v.t = t.UTC()
		return nil
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return fmt.Errorf("%q: want RFC 3339 or YYYY-MM-DD", s)
	}
	v.t = t
	return nil
}

// Required refuses the zero time of a flag not given.
func Required(name string, t time.Time) error {
	if t.IsZero() {
		return Usagef("--%s: required", name)
	}
	return nil
}

// Zone defines a flag of a time zone name (UTC, Europe/Berlin, Local); a
// flag not given is nil.
func Zone(fs *pflag.FlagSet, name, usage string) **time.Location {
	v := new(zoneValue)
	fs.Var(v, name, usage)
	return &v.loc
}

type zoneValue struct{ loc *time.Location }

func (v *zoneValue) Type() string { return "zone" }

func (v *zoneValue) String() string {
	if v.loc == nil {
		return ""
	}
	return v.loc.String()
}

func (v *zoneValue) Set(s string) (err error) {
	v.loc, err = time.LoadLocation(s)
	return err
}
