package store

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ClickHouse/ch-go/compress"
	"github.com/ClickHouse/ch-go/proto"
)

// The sample insert path speaks ClickHouse's native protocol itself,
// insert only, instead of through clickhouse-go: it encodes the spool's
// columns straight into a native block in buffers kept from insert to
// insert, with no per-row copy into driver columns (docs/delivery.md,
// "What an insert looks like"). ch-go's proto package reads the server's
// packets and ch-go's compress frames the blocks; ch-go's own client is
// not used because it cannot talk to servers before revision 54420
// (18.16 is 54412: it leaves out the client info of a query).

// nativeRevision is the protocol revision this client declares. The
// server answers with its own and both use the lower. 54429 is the first
// with settings sent as strings; it stays below every later addition
// (interserver secret, OpenTelemetry, profile-event packets, custom
// serialization, the hello addendum), which newer servers still accept
// from older clients, so one small set of packets covers 18.16 (54412)
// through 24.x and later.
const nativeRevision = 54429

// Protocol revisions that change what this client writes or reads.
const (
	revisionClientInfo     = 54032 // a query carries client info
	revisionQuotaKey       = 54060 // client info ends in a quota key
	revisionVersionPatch   = 54401 // client info carries the version patch
	revisionStringSettings = 54429 // settings as name, flags, string value
)

// Client packet codes.
const (
	clientHello = 0
	clientQuery = 1
	clientData  = 2
)

// nativeFrameBytes is how much of a block is encoded before it is
// LZ4-compressed and framed: 64 KiB, below any column of a 10,000-row
// block but above its header, so each column is compressed while it is
// still in the CPU cache (docs/performance.md).
const nativeFrameBytes = 64 << 10

// nativePool keeps the native connections of the sample insert path:
// at most cfg.MaxOpenConns open at once, up to cfg.MaxIdleConns kept
// idle between inserts (with their buffers).
type nativePool struct {
	cfg   Config
	slots chan struct{} // one per open connection

	mu     sync.Mutex
	idle   []*nativeConn
	closed bool
}

func newNativePool(cfg Config) *nativePool {
	return &nativePool{cfg: cfg, slots: make(chan struct{}, max(cfg.MaxOpenConns, 1))}
}

// get returns an idle connection or dials a new one, waiting for a slot
// while MaxOpenConns are open.
func (p *nativePool) get(ctx context.Context) (*nativeConn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, errors.New("store closed")
		}
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		// A server restarted since this connection's last insert has
		// closed it: found here, that costs a dial instead of a failed
		// insert and the shipper's backoff.
		if c.alive() {
			return c, nil
		}
		p.discard(c)
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for a connection: %w", ctx.Err())
	}
	c, err := dialNative(ctx, p.cfg)
	if err != nil {
		<-p.slots
		return nil, err
	}
	return c, nil
}

// put returns a connection whose last insert ended cleanly; it is kept
// idle unless the pool holds MaxIdleConns already.
func (p *nativePool) put(c *nativeConn) {
	p.mu.Lock()
	if !p.closed && len(p.idle) < p.cfg.MaxIdleConns {
		p.idle = append(p.idle, c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.discard(c)
}

// discard closes a connection, as after any failed insert: what the
// server read of it is unknown.
func (p *nativePool) discard(c *nativeConn) {
	c.close()
	<-p.slots
}

func (p *nativePool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		p.discard(c)
	}
}

// nativeConn is one handshaken connection with its buffers, which are
// reused by every insert it runs.
type nativeConn struct {
	conn     net.Conn
	r        *proto.Reader
	revision int // the lower of the server's and nativeRevision
	cfg      Config

	out  []byte // what goes on the wire next
	raw  []byte // block bytes not yet compressed
	comp *compress.Writer
	lc   lowCardinalityScratch

	header []nativeColumn // the last insert's columns, as the server named them
	fields []sampleField  // where each comes from
}

func dialNative(ctx context.Context, cfg Config) (*nativeConn, error) {
	var lastErr error
	for _, addr := range cfg.Addrs {
		c, err := dialNativeAddr(ctx, cfg, addr)
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func dialNativeAddr(ctx context.Context, cfg Config, addr string) (*nativeConn, error) {
	d := net.Dialer{Timeout: cfg.DialTimeout}
	var conn net.Conn
	var err error
	if cfg.TLS {
		td := tls.Dialer{NetDialer: &d, Config: &tls.Config{InsecureSkipVerify: cfg.TLSInsecureSkipVerify}} //nolint:gosec // operator's explicit choice
		conn, err = td.DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c := &nativeConn{conn: conn, r: proto.NewReader(conn), cfg: cfg}
	if cfg.Compress {
		c.comp = compress.NewWriter(compress.LevelZero, compress.LZ4)
	}
	stop := c.watch(ctx, cfg.DialTimeout)
	err = c.handshake()
	if stopErr := stop(); err == nil {
		err = stopErr
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("handshake with %s: %w", addr, err)
	}
	return c, nil
}

// watch bounds the connection's I/O by ctx's deadline and by timeout
// (when above 0), whichever comes first, and cuts it at once when ctx is
// cancelled. stop ends the watch and returns ctx's error if ctx ended
// the I/O.
func (c *nativeConn) watch(ctx context.Context, timeout time.Duration) (stop func() error) {
	deadline, _ := ctx.Deadline()
	if timeout > 0 {
		if d := time.Now().Add(timeout); deadline.IsZero() || d.Before(deadline) {
			deadline = d
		}
	}
	_ = c.conn.SetDeadline(deadline)
	cancelled := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
	return func() error {
		if !cancelled() {
			return ctx.Err()
		}
		_ = c.conn.SetDeadline(time.Time{})
		return nil
	}
}

func (c *nativeConn) close() { _ = c.conn.Close() }

// alive reports whether an idle connection is still open: between inserts
// the server sends nothing, so a socket with anything to read (end of
// stream, or a stray byte: either way unusable) is not. It peeks without
// waiting, instead of a read with a deadline, which cost every insert up
// to a millisecond.
func (c *nativeConn) alive() bool {
	raw := c.conn
	if t, ok := raw.(*tls.Conn); ok {
		raw = t.NetConn()
	}
	sc, ok := raw.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	err = rc.Read(func(fd uintptr) bool {
		var one [1]byte
		_, _, err := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = errors.Is(err, syscall.EAGAIN)
		return true // done: never wait for the socket to become readable
	})
	return err == nil && open
}

// appendHello adds the client's hello to b.
func appendHello(b []byte, cfg Config) []byte {
	b = append(b, clientHello)
	b = appendString(b, "gpumeter")
	b = binary.AppendUvarint(b, 1) // client version major
	b = binary.AppendUvarint(b, 0) // minor
	b = binary.AppendUvarint(b, nativeRevision)
	b = appendString(b, cfg.Database)
	b = appendString(b, cfg.Username)
	return appendString(b, string(cfg.Password))
}

func (c *nativeConn) handshake() error {
	b := appendHello(c.out[:0], c.cfg)
	c.out = b
	if _, err := c.conn.Write(b); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	code, err := c.r.UInt8()
	if err != nil {
		return fmt.Errorf("read hello: %w", err)
	}
	switch proto.ServerCode(code) {
	case proto.ServerCodeHello:
	case proto.ServerCodeException:
		return c.readException()
	default:
		return fmt.Errorf("unexpected packet %d instead of the server's hello", code)
	}
	var hello proto.ServerHello
	if err := hello.DecodeAware(c.r, nativeRevision); err != nil {
		return fmt.Errorf("read hello: %w", err)
	}
	c.revision = min(hello.Revision, nativeRevision)
	return nil
}

// nativeColumn is one column of an insert as the server's header block
// names it, and how this client encodes it.
type nativeColumn struct {
	name, typ string
	kind      columnKind
}

type columnKind uint8

const (
	kindUInt64 columnKind = iota
	kindUInt8
	kindDateTime
	kindString
	kindLowCardinalityString
)

// kindOf maps a server type name to an encoding this client has.
func kindOf(typ string) (columnKind, bool) {
	switch {
	case typ == "UInt64":
		return kindUInt64, true
	case typ == "UInt8":
		return kindUInt8, true
	case typ == "DateTime" || strings.HasPrefix(typ, "DateTime("):
		return kindDateTime, true
	case typ == "String":
		return kindString, true
	case typ == "LowCardinality(String)":
		return kindLowCardinalityString, true
	}
	return 0, false
}

// begin sends an INSERT query and reads the header block the server
// answers with: the columns it expects, their names and types.
func (c *nativeConn) begin(query string, columns []nativeColumn) ([]nativeColumn, error) {
	c.out = appendQuery(c.out[:0], c.revision, c.cfg, c.conn.LocalAddr().String(), query)
	if err := c.appendBlock(nil, 0, nil); err != nil { // no external tables
		return nil, err
	}
	if err := c.flush(); err != nil {
		return nil, fmt.Errorf("send query: %w", err)
	}
	header, err := c.readHeader(columns[:0])
	if err != nil {
		return nil, err
	}
	return header, nil
}

// appendQuery adds an INSERT query packet to b as protocol revision
// revision writes it.
func appendQuery(b []byte, revision int, cfg Config, localAddr, query string) []byte {
	b = append(b, clientQuery)
	b = appendString(b, "") // query id: the server makes one
	if revision >= revisionClientInfo {
		b = append(b, 1)        // initial query
		b = appendString(b, "") // initial user
		b = appendString(b, "") // initial query id
		b = appendString(b, localAddr)
		b = append(b, 1)        // interface: TCP
		b = appendString(b, "") // OS user
		b = appendString(b, "") // client host name
		b = appendString(b, "gpumeter")
		b = binary.AppendUvarint(b, 1) // client version major
		b = binary.AppendUvarint(b, 0) // minor
		b = binary.AppendUvarint(b, nativeRevision)
		if revision >= revisionQuotaKey {
			b = appendString(b, "")
		}
		if revision >= revisionVersionPatch {
			b = binary.AppendUvarint(b, 0)
		}
	}
	// The settings every statement of the store runs with (options in
	// store.go): insert_distributed_sync makes a cluster insert return
	// only once every shard wrote its rows, so the shipper's cursor still
	// moves past acknowledged rows only.
	settings := [...]struct {
		name  string
		value uint64
	}{
		{"max_execution_time", uint64(cfg.QueryTimeout.Seconds())},
		{"insert_distributed_sync", 1},
	}
	for _, s := range settings {
		b = appendString(b, s.name)
		if revision >= revisionStringSettings {
			b = binary.AppendUvarint(b, 0) // flags
			b = appendString(b, strconv.FormatUint(s.value, 10))
		} else {
			b = binary.AppendUvarint(b, s.value) // both are integer settings
		}
	}
	b = appendString(b, "")        // end of settings
	b = binary.AppendUvarint(b, 2) // stage: complete
	if cfg.Compress {
		b = binary.AppendUvarint(b, 1)
	} else {
		b = binary.AppendUvarint(b, 0)
	}
	return appendString(b, query)
}

// readHeader reads packets until the server's header block and returns
// its columns in dst.
func (c *nativeConn) readHeader(dst []nativeColumn) ([]nativeColumn, error) {
	for {
		code, err := c.r.UInt8()
		if err != nil {
			return nil, fmt.Errorf("read header: %w", err)
		}
		switch proto.ServerCode(code) {
		case proto.ServerCodeData:
			return c.readHeaderBlock(dst)
		case proto.ServerCodeException:
			return nil, c.readException()
		case proto.ServerCodeTableColumns:
			if err := c.skipStrings(2); err != nil {
				return nil, fmt.Errorf("read table columns: %w", err)
			}
		case proto.ServerCodeProgress:
			if err := c.readProgress(); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("unexpected packet %d before the header block", code)
		}
	}
}

func (c *nativeConn) readHeaderBlock(dst []nativeColumn) ([]nativeColumn, error) {
	if err := c.skipStrings(1); err != nil { // table name
		return nil, fmt.Errorf("read header block: %w", err)
	}
	if c.cfg.Compress {
		c.r.EnableCompression()
		defer c.r.DisableCompression()
	}
	// Block info: field 1 is_overflows (bool), field 2 bucket_num (Int32), 0 ends.
	for {
		field, err := c.r.UVarInt()
		if err != nil {
			return nil, fmt.Errorf("read header block info: %w", err)
		}
		if field == 0 {
			break
		}
		switch field {
		case 1:
			_, err = c.r.Bool()
		case 2:
			_, err = c.r.Int32()
		default:
			err = fmt.Errorf("unknown block info field %d", field)
		}
		if err != nil {
			return nil, fmt.Errorf("read header block info: %w", err)
		}
	}
	ncols, err := c.r.UVarInt()
	if err != nil {
		return nil, fmt.Errorf("read header block: %w", err)
	}
	nrows, err := c.r.UVarInt()
	if err != nil {
		return nil, fmt.Errorf("read header block: %w", err)
	}
	if nrows != 0 || ncols > 1000 {
		return nil, fmt.Errorf("header block of %d columns and %d rows: want no rows", ncols, nrows)
	}
	for range ncols {
		name, err := c.r.Str()
		if err != nil {
			return nil, fmt.Errorf("read header column: %w", err)
		}
		typ, err := c.r.Str()
		if err != nil {
			return nil, fmt.Errorf("read header column %s: %w", name, err)
		}
		kind, ok := kindOf(typ)
		if !ok {
			return nil, fmt.Errorf("column %s has type %s, which the sample insert does not encode", name, typ)
		}
		dst = append(dst, nativeColumn{name: name, typ: typ, kind: kind})
	}
	return dst, nil
}

// finish sends the empty block that ends the data and reads until the
// server's end of stream: the insert is acknowledged only then.
func (c *nativeConn) finish() error {
	if err := c.appendBlock(nil, 0, nil); err != nil {
		return err
	}
	if err := c.flush(); err != nil {
		return fmt.Errorf("send end of data: %w", err)
	}
	for {
		code, err := c.r.UInt8()
		if err != nil {
			return fmt.Errorf("read acknowledgement: %w", err)
		}
		switch proto.ServerCode(code) {
		case proto.ServerCodeEndOfStream:
			return nil
		case proto.ServerCodeException:
			return c.readException()
		case proto.ServerCodeProgress:
			if err := c.readProgress(); err != nil {
				return err
			}
		case proto.ServerCodeProfile:
			var p proto.Profile
			if err := p.DecodeAware(c.r, c.revision); err != nil {
				return fmt.Errorf("read profile info: %w", err)
			}
		case proto.ServerCodeTableColumns:
			if err := c.skipStrings(2); err != nil {
				return fmt.Errorf("read table columns: %w", err)
			}
		default:
			return fmt.Errorf("unexpected packet %d after the data", code)
		}
	}
}

func (c *nativeConn) readProgress() error {
	var p proto.Progress
	if err := p.DecodeAware(c.r, c.revision); err != nil {
		return fmt.Errorf("read progress: %w", err)
	}
	return nil
}

func (c *nativeConn) skipStrings(n int) error {
	for range n {
		if _, err := c.r.StrRaw(); err != nil {
			return err
		}
	}
	return nil
}

// ServerError is an exception ClickHouse answered a native insert with.
type ServerError struct {
	Code    int32
	Name    string
	Message string
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("clickhouse exception %d (%s): %s", e.Code, e.Name, e.Message)
}

// readException reads an exception packet (servers before 20.x may
// chain nested ones; the first is the one that says what went wrong).
func (c *nativeConn) readException() error {
	var first *ServerError
	for {
		code, err := c.r.Int32()
		if err != nil {
			return fmt.Errorf("read exception: %w", err)
		}
		name, err := c.r.Str()
		if err != nil {
			return fmt.Errorf("read exception: %w", err)
		}
		msg, err := c.r.Str()
		if err != nil {
			return fmt.Errorf("read exception: %w", err)
		}
		if _, err := c.r.StrRaw(); err != nil { // stack trace
			return fmt.Errorf("read exception: %w", err)
		}
		nested, err := c.r.Bool()
		if err != nil {
			return fmt.Errorf("read exception: %w", err)
		}
		if first == nil {
			first = &ServerError{Code: code, Name: name, Message: msg}
		}
		if !nested {
			return first
		}
	}
}

// blockSource writes one column of a block's rows, in header order.
type blockSource func(b []byte, col int, c *nativeColumn) []byte

// appendBlock adds a Data packet of rows rows to c.out, each column
// written by src (nil for the empty block that marks an end), compressed
// in frames of about nativeFrameBytes when the config says so.
func (c *nativeConn) appendBlock(columns []nativeColumn, rows int, src blockSource) error {
	c.out = append(c.out, clientData)
	c.out = appendString(c.out, "") // table name
	b := c.raw[:0]
	b = append(b, 1, 0)                      // block info: is_overflows false
	b = append(b, 2, 0xff, 0xff, 0xff, 0xff) // bucket_num -1
	b = append(b, 0)
	b = binary.AppendUvarint(b, uint64(len(columns)))
	b = binary.AppendUvarint(b, uint64(rows))
	var err error
	for i := range columns {
		col := &columns[i]
		b = appendString(b, col.name)
		b = appendString(b, col.typ)
		if rows > 0 {
			b = src(b, i, col)
		}
		if len(b) >= nativeFrameBytes {
			if b, err = c.frame(b); err != nil {
				return err
			}
		}
	}
	c.raw, err = c.frame(b)
	return err
}

// frame moves b to c.out, compressed when the config says so, and
// returns b emptied.
func (c *nativeConn) frame(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return b, nil
	}
	if c.comp == nil {
		c.out = append(c.out, b...)
		return b[:0], nil
	}
	if err := c.comp.Compress(b); err != nil {
		return b[:0], fmt.Errorf("compress block: %w", err)
	}
	c.out = append(c.out, c.comp.Data...)
	return b[:0], nil
}

func (c *nativeConn) flush() error {
	_, err := c.conn.Write(c.out)
	c.out = c.out[:0]
	return err
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// lowCardinalityScratch maps an insert's dictionary codes to a block's
// own keys, reused from block to block.
type lowCardinalityScratch struct {
	local []uint32 // by Dict code: 1 + the key's index in this block, 0 for none
	keys  []uint32 // this block's keys, as Dict codes
	index []uint32 // by row: the key's index
}

// LowCardinality serialization (ClickHouse's SerializationLowCardinality,
// as ch-go's ColLowCardinality writes it): a key-serialization version
// in the state prefix, then per block the index width with "additional
// keys" and "update dictionary" set, the keys, the rows and their indexes.
const (
	lcSharedDictionariesWithAdditionalKeys = 1
	lcHasAdditionalKeys                    = 1 << 9
	lcNeedUpdateDictionary                 = 1 << 10
	lcIndexUInt8                           = 0
	lcIndexUInt16                          = 1
	lcIndexUInt32                          = 2
)

// appendLowCardinality writes codes (Dict indexes, one per row) as a
// LowCardinality(String) column.
func (s *lowCardinalityScratch) appendLowCardinality(b []byte, dict []string, codes func(yield func(uint32))) []byte {
	if cap(s.local) < len(dict) {
		s.local = make([]uint32, len(dict))
	}
	s.local = s.local[:len(dict)]
	s.keys, s.index = s.keys[:0], s.index[:0]
	codes(func(k uint32) {
		if s.local[k] == 0 {
			s.keys = append(s.keys, k)
			s.local[k] = uint32(len(s.keys))
		}
		s.index = append(s.index, s.local[k]-1)
	})
	for _, k := range s.keys {
		s.local[k] = 0
	}
	b = binary.LittleEndian.AppendUint64(b, lcSharedDictionariesWithAdditionalKeys)
	width := uint64(lcIndexUInt32)
	switch {
	case len(s.keys) <= 1<<8:
		width = lcIndexUInt8
	case len(s.keys) <= 1<<16:
		width = lcIndexUInt16
	}
	b = binary.LittleEndian.AppendUint64(b, width|lcHasAdditionalKeys|lcNeedUpdateDictionary)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s.keys)))
	for _, k := range s.keys {
		b = appendString(b, dict[k])
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s.index)))
	switch width {
	case lcIndexUInt8:
		for _, i := range s.index {
			b = append(b, byte(i))
		}
	case lcIndexUInt16:
		for _, i := range s.index {
			b = binary.LittleEndian.AppendUint16(b, uint16(i))
		}
	default:
		for _, i := range s.index {
			b = binary.LittleEndian.AppendUint32(b, i)
		}
	}
	return b
}
