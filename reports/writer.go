package reports

import "io"

// errWriter keeps the first write error and writes nothing after it, so a
// renderer prints unchecked and reports the failure once at the end.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
