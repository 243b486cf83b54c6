package auth

import "time"

// Lifetime is a key's lifetime as a flag value (pflag.Value): whole days
// (30d) or a Go duration (72h), read by ParseLifetime.
type Lifetime time.Duration

func (l *Lifetime) String() string { return time.Duration(*l).String() }
func (l *Lifetime) Type() string   { return "duration" }
func (l *Lifetime) Set(v string) error {
	d, err := ParseLifetime(v)
	*l = Lifetime(d)
	return err
}
