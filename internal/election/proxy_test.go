package election

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// partitionProxy forwards one client's TCP connections to ZooKeeper and
// can cut it off silently: while partitioned it accepts and reads but
// forwards nothing either way, as a dropped network link does (no reset
// that would tell the client at once).
type partitionProxy struct {
	ln          net.Listener
	target      string
	partitioned atomic.Bool
	mu          sync.Mutex
	conns       []net.Conn
	cutOff      []net.Conn // accepted during the partition
}

func startPartitionProxy(t *testing.T, target string) *partitionProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &partitionProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *partitionProxy) Addr() string { return p.ln.Addr().String() }

// Partition drops all traffic from now on, on every connection.
func (p *partitionProxy) Partition() { p.partitioned.Store(true) }

// Heal forwards again and resets the connections accepted during the
// partition, which were never joined to the server: the client dials anew
// at once instead of waiting out its handshake timeout on them.
func (p *partitionProxy) Heal() {
	p.partitioned.Store(false)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.cutOff {
		c.Close()
	}
	p.cutOff = nil
}

func (p *partitionProxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.partitioned.Load() {
			p.track(client)
			p.mu.Lock()
			p.cutOff = append(p.cutOff, client)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, client) }()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.track(client)
		p.track(server)
		go p.pipe(server, client)
		go p.pipe(client, server)
	}
}

func (p *partitionProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

// pipe copies src to dst, dropping the bytes while partitioned.
func (p *partitionProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.partitioned.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !p.partitioned.Load() {
				dst.Close()
			}
			return
		}
	}
}

func (p *partitionProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}
