// Golden fixture generator for viiwork's TypeScript memberlist.
//
// This file is compiled INSIDE a temporary copy of Debian's
// github.com/hashicorp/memberlist package (see gen.sh and README.md), so it
// can call memberlist's own unexported encode functions: encode(),
// makeCompoundMessage(), compressPayload(), rawSendMsgPacket(),
// sendLocalState(), rawSendMsgStream(), encryptPayload().
//
// Output: a JSON object {name: {"hex": "...", "note": "..."}} written to
// $GOLDEN_OUT.
package memberlist

import (
	"encoding/hex"
	"encoding/json"
	"io/ioutil"
	"log"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

type goldenEntry struct {
	Hex  string `json:"hex"`
	Note string `json:"note"`
}

var golden = map[string]goldenEntry{}

func put(name, note string, b []byte) {
	golden[name] = goldenEntry{Hex: hex.EncodeToString(b), Note: note}
}

func mustEncode(t *testing.T, mt messageType, v interface{}) []byte {
	buf, err := encode(mt, v)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// lcgBytes is a tiny deterministic generator also written in the TS test.
func lcgBytes(n int, seed uint32, alphabet string) []byte {
	out := make([]byte, n)
	x := seed
	for i := range out {
		x = x*1103515245 + 12345
		out[i] = alphabet[(x>>16)%uint32(len(alphabet))]
	}
	return out
}

func testKey() []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = byte(i)
	}
	return k
}

// newFakeMemberlist builds just enough of a Memberlist to run the send path.
func newFakeMemberlist(t *testing.T, compression bool, key []byte, tr NodeAwareTransport) *Memberlist {
	conf := DefaultLANConfig()
	conf.Name = "node-a"
	conf.EnableCompression = compression
	if key != nil {
		kr, err := NewKeyring(nil, key)
		if err != nil {
			t.Fatal(err)
		}
		conf.Keyring = kr
	}
	m := &Memberlist{
		config:  conf,
		nodeMap: map[string]*nodeState{},
		logger:  log.New(os.Stderr, "", 0),
		transport: tr,
	}
	return m
}

func capturePacket(t *testing.T, compression bool, key []byte, pmax uint8, msg []byte) []byte {
	net := &MockNetwork{}
	a := net.NewTransport("a")
	b := net.NewTransport("b")
	m := newFakeMemberlist(t, compression, key, a)
	node := &Node{Name: "b", PMax: pmax}
	got := make(chan []byte, 1)
	go func() { p := <-b.PacketCh(); got <- p.Buf }()
	if err := m.rawSendMsgPacket(Address{Addr: b.addr.String(), Name: "b"}, node, msg); err != nil {
		t.Fatal(err)
	}
	select {
	case buf := <-got:
		return buf
	case <-time.After(5 * time.Second):
		t.Fatal("no packet")
	}
	return nil
}

type fixedDelegate struct{ state []byte }

func (d *fixedDelegate) NodeMeta(limit int) []byte                  { return nil }
func (d *fixedDelegate) NotifyMsg([]byte)                           {}
func (d *fixedDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *fixedDelegate) LocalState(join bool) []byte                { return d.state }
func (d *fixedDelegate) MergeRemoteState(buf []byte, join bool)     {}

func captureStream(t *testing.T, send func(m *Memberlist, c net.Conn) error, compression bool, key []byte, userState []byte) []byte {
	m := newFakeMemberlist(t, compression, key, nil)
	if userState != nil {
		m.config.Delegate = &fixedDelegate{userState}
	}
	m.nodes = []*nodeState{
		{Node: Node{Name: "node-a", Addr: net.IPv4(127, 0, 1, 1).To4(), Port: 7946, Meta: []byte(`{"v":2}`),
			PMin: 1, PMax: 5, PCur: 2, DMin: 2, DMax: 5, DCur: 5}, Incarnation: 3, State: StateAlive},
		{Node: Node{Name: "node-b", Addr: net.IPv4(127, 0, 1, 2).To4(), Port: 7946, Meta: nil,
			PMin: 1, PMax: 5, PCur: 2, DMin: 2, DMax: 5, DCur: 4}, Incarnation: 1, State: StateSuspect},
		{Node: Node{Name: "node-c", Addr: net.IPv4(127, 0, 1, 3).To4(), Port: 7947, Meta: []byte{},
			PMin: 1, PMax: 5, PCur: 2, DMin: 2, DMax: 5, DCur: 5}, Incarnation: 9, State: StateLeft},
	}
	c1, c2 := net.Pipe()
	done := make(chan []byte)
	go func() {
		b, _ := ioutil.ReadAll(c2)
		done <- b
	}()
	if err := send(m, c1); err != nil {
		t.Fatal(err)
	}
	c1.Close()
	return <-done
}

func TestGolden(t *testing.T) {
	out := os.Getenv("GOLDEN_OUT")
	if out == "" {
		t.Skip("GOLDEN_OUT not set")
	}
	addrA := net.IPv4(127, 0, 1, 1).To4()
	addrB := net.IPv4(127, 0, 1, 2).To4()

	ping1 := mustEncode(t, pingMsg, &ping{SeqNo: 42, Node: "node-b", SourceAddr: addrA, SourcePort: 7946, SourceNode: "node-a"})
	put("ping", "ping SeqNo 42 to node-b from node-a 127.0.1.1:7946", ping1)
	put("ping_minimal", "ping SeqNo 1 Node x, omitempty fields absent", mustEncode(t, pingMsg, &ping{SeqNo: 1, Node: "x"}))
	put("indirect_ping", "indirect ping SeqNo 7 target 127.0.1.2:7946 node-b nack", mustEncode(t, indirectPingMsg, &indirectPingReq{
		SeqNo: 7, Target: addrB, Port: 7946, Node: "node-b", Nack: true, SourceAddr: addrA, SourcePort: 7946, SourceNode: "node-a"}))
	put("ack", "ack SeqNo 300 nil payload", mustEncode(t, ackRespMsg, &ackResp{SeqNo: 300}))
	put("ack_payload", "ack SeqNo 70000 payload hi", mustEncode(t, ackRespMsg, &ackResp{SeqNo: 70000, Payload: []byte("hi")}))
	put("nack", "nack SeqNo 5000000000 mod 2^32", mustEncode(t, nackRespMsg, &nackResp{SeqNo: 705032704}))
	put("err", "err resp", mustEncode(t, errMsg, &errResp{Error: "boom"}))
	sus := mustEncode(t, suspectMsg, &suspect{Incarnation: 3, Node: "node-b", From: "node-a"})
	put("suspect", "suspect inc 3 node-b from node-a", sus)
	put("dead", "dead inc 128 node-b from node-a", mustEncode(t, deadMsg, &dead{Incarnation: 128, Node: "node-b", From: "node-a"}))
	put("dead_left", "dead (leave) inc 2 node-a from node-a", mustEncode(t, deadMsg, &dead{Incarnation: 2, Node: "node-a", From: "node-a"}))
	alive1 := mustEncode(t, aliveMsg, &alive{Incarnation: 1, Node: "node-a", Addr: addrA, Port: 7946,
		Meta: []byte(`{"v":2,"api":8086,"ver":"0.1.0","role":"node"}`), Vsn: []uint8{1, 5, 2, 2, 5, 5}})
	put("alive", "alive inc 1 node-a 127.0.1.1:7946 json meta vsn 1,5,2,2,5,5", alive1)
	put("alive_nil_meta", "alive with nil Meta and nil Vsn", mustEncode(t, aliveMsg, &alive{Incarnation: 0, Node: "n", Addr: addrA, Port: 1}))
	longName := strings.Repeat("long-node-name-", 3)
	alive2 := mustEncode(t, aliveMsg, &alive{Incarnation: 4294967295, Node: longName, Addr: net.ParseIP("::1"), Port: 65535,
		Meta: lcgBytes(300, 1, "abcdefghij"), Vsn: []uint8{1, 5, 2, 2, 5, 4}})
	put("alive_long", "alive: 45-char name, 16-byte addr, 300-byte meta, max inc", alive2)

	put("compound", "compound of ping, suspect, alive", makeCompoundMessage([][]byte{ping1, sus, alive1}).Bytes())

	lzwIn := lcgBytes(20000, 7, "abcdefghijklmnopqrstuvwxyz")
	put("lzw_input", "20000 LCG bytes (seed 7, a-z)", lzwIn)
	c, err := compressPayload(lzwIn)
	if err != nil {
		t.Fatal(err)
	}
	put("compressed_big", "compressPayload(lzw_input): table fills and clears", c.Bytes())
	c2, _ := compressPayload(alive1)
	put("compressed_alive", "compressPayload(alive)", c2.Bytes())
	c3, _ := compressPayload([]byte{})
	put("compressed_empty", "compressPayload(empty)", c3.Bytes())
	c4, _ := compressPayload([]byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"))
	put("compressed_aaa", "compressPayload(64 x a): KwKwK codes", c4.Bytes())

	put("packet_crc", "rawSendMsgPacket(ping) no compression, peer pmax 5", capturePacket(t, false, nil, 5, ping1))
	put("packet_nocrc", "rawSendMsgPacket(ping) no compression, peer pmax 4", capturePacket(t, false, nil, 4, ping1))
	bigAlive := mustEncode(t, aliveMsg, &alive{Incarnation: 1, Node: "node-a", Addr: addrA, Port: 7946,
		Meta: []byte(strings.Repeat("meta", 100)), Vsn: []uint8{1, 5, 2, 2, 5, 5}})
	put("alive_big", "alive with 400-byte repetitive meta", bigAlive)
	put("packet_compress_crc", "rawSendMsgPacket(alive_big) compression, peer pmax 5", capturePacket(t, true, nil, 5, bigAlive))
	put("key", "32-byte key 00..1f", testKey())
	put("packet_encrypted", "rawSendMsgPacket(alive_big) compression, crc, encrypted with key (random nonce)", capturePacket(t, true, testKey(), 5, bigAlive))
	enc0 := new(bytesBuffer)
	if err := encryptPayload(0, testKey(), ping1, nil, &enc0.Buffer); err != nil {
		t.Fatal(err)
	}
	put("encrypted_v0", "encryptPayload version 0 (PKCS7) of ping", enc0.Bytes())
	enc1 := new(bytesBuffer)
	if err := encryptPayload(1, testKey(), ping1, []byte("viiwork-v2"), &enc1.Buffer); err != nil {
		t.Fatal(err)
	}
	put("encrypted_v1_label", "encryptPayload version 1 of ping with AAD viiwork-v2", enc1.Bytes())

	userState := []byte{0x80, 1, 2, 3, 'a', 'l', 'i', 'a', 's'}
	put("pushpull_plain", "sendLocalState(join=true) 3 nodes + user state, no compression",
		captureStream(t, func(m *Memberlist, c net.Conn) error { return m.sendLocalState(c, true) }, false, nil, userState))
	put("pushpull_compressed", "sendLocalState(join=false) 3 nodes + user state, compression",
		captureStream(t, func(m *Memberlist, c net.Conn) error { return m.sendLocalState(c, false) }, true, nil, userState))
	put("pushpull_nouser", "sendLocalState(join=false) no delegate, no compression",
		captureStream(t, func(m *Memberlist, c net.Conn) error { return m.sendLocalState(c, false) }, false, nil, nil))
	put("pushpull_encrypted", "sendLocalState(join=true) compression + encryption (random nonce)",
		captureStream(t, func(m *Memberlist, c net.Conn) error { return m.sendLocalState(c, true) }, true, testKey(), userState))
	ackStream := mustEncode(t, ackRespMsg, &ackResp{SeqNo: 42})
	put("stream_ack_plain", "rawSendMsgStream(ack 42), no compression",
		captureStream(t, func(m *Memberlist, c net.Conn) error { return m.rawSendMsgStream(c, ackStream) }, false, nil, nil))

	js, _ := json.MarshalIndent(golden, "", "  ")
	if err := ioutil.WriteFile(out, append(js, '\n'), 0644); err != nil {
		t.Fatal(err)
	}
}
