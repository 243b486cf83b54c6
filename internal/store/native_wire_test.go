package store

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/proto"
)

// ClickHouse 18.16 (revision 54412), which the tests run, never gets the
// packets of revision 54429, the one 24.x and later servers settle on with
// this client. These tests hold them to ch-go's encoders, which ch-go
// tests against current servers.

func TestHelloMatchesChGo(t *testing.T) {
	cfg := Config{Database: "db", Username: "u", Password: "p"}
	var want proto.Buffer
	proto.ClientHello{Name: "gpumeter", Major: 1, Minor: 0, ProtocolVersion: nativeRevision, Database: "db", User: "u", Password: "p"}.Encode(&want)
	if got := appendHello(nil, cfg); !bytes.Equal(got, want.Buf) {
		t.Fatalf("hello\n got %x\nwant %x", got, want.Buf)
	}
}

func TestQueryAtRevision54429MatchesChGo(t *testing.T) {
	for _, compressed := range []bool{true, false} {
		cfg := Config{QueryTimeout: 90 * time.Second, Compress: compressed}
		const body = "INSERT INTO usage_samples (sample_id) FORMAT Native"
		q := proto.Query{
			Body: body,
			Info: proto.ClientInfo{
				ProtocolVersion: nativeRevision, Major: 1, Interface: proto.InterfaceTCP,
				Query: proto.ClientQueryInitial, InitialAddress: "127.0.0.1:5000", ClientName: "gpumeter",
			},
			Settings: []proto.Setting{{Key: "max_execution_time", Value: "90"}, {Key: "insert_distributed_sync", Value: "1"}},
		}
		if compressed {
			q.Compression = proto.CompressionEnabled
		}
		var want proto.Buffer
		q.EncodeAware(&want, nativeRevision)
		if got := appendQuery(nil, nativeRevision, cfg, "127.0.0.1:5000", body); !bytes.Equal(got, want.Buf) {
			t.Fatalf("compress %v: query\n got %x\nwant %x", compressed, got, want.Buf)
		}
	}
}

func TestLowCardinalityMatchesChGo(t *testing.T) {
	for _, distinct := range []int{1, 3, 256, 257, 700} {
		t.Run(fmt.Sprint(distinct), func(t *testing.T) {
			var dict []string
			for i := range distinct {
				dict = append(dict, fmt.Sprintf("value-%d", i))
			}
			var codes []uint32
			col := proto.NewLowCardinality[string](new(proto.ColStr))
			for i := range 2000 {
				k := uint32((i * 7) % distinct)
				codes = append(codes, k)
				col.Append(dict[k])
			}
			if err := col.Prepare(); err != nil {
				t.Fatal(err)
			}
			var want proto.Buffer
			col.EncodeState(&want)
			col.EncodeColumn(&want)
			var s lowCardinalityScratch
			for range 2 { // the scratch is reused
				got := s.appendLowCardinality(nil, dict, func(yield func(uint32)) {
					for _, k := range codes {
						yield(k)
					}
				})
				if !bytes.Equal(got, want.Buf) {
					t.Fatalf("%d distinct: LowCardinality column differs from ch-go's (%d bytes against %d)", distinct, len(got), len(want.Buf))
				}
			}
		})
	}
}

// TestAliveTellsAnIdleConnectionFromAClosedOne: the check before reuse
// keeps a connection the server left idle and drops one it closed or
// wrote to, without waiting.
func TestAliveTellsAnIdleConnectionFromAClosedOne(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pair := func() (client *nativeConn, server net.Conn) {
		t.Helper()
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err = ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(); server.Close() })
		return &nativeConn{conn: conn}, server
	}
	// waitReadable returns once the client's socket has something to read,
	// so that the check below sees what the server did.
	waitReadable := func(c *nativeConn) {
		t.Helper()
		rc, err := c.conn.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Read(func(fd uintptr) bool {
			var one [1]byte
			_, _, err := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			return !errors.Is(err, syscall.EAGAIN)
		}); err != nil {
			t.Fatal(err)
		}
	}

	idle, _ := pair()
	if !idle.alive() || !idle.alive() {
		t.Error("an idle open connection was found dead")
	}
	closed, server := pair()
	server.Close()
	waitReadable(closed)
	if closed.alive() {
		t.Error("a connection the server closed was found alive")
	}
	stray, server := pair()
	if _, err := server.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	waitReadable(stray)
	if stray.alive() {
		t.Error("a connection with a stray byte to read was found alive")
	}
}
