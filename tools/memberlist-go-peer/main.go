// memberlist-go-peer: a plain Go memberlist application, for viiwork's
// interop tests (test/memberlist/go-interop.test.ts builds and runs it).
//
// It uses memberlist.DefaultLANConfig() as is (delegate protocol range
// 0/0/0, no delegate), only setting the name, address and port, so it is
// exactly what a Go program embedding memberlist looks like.
//
// Flags: -name, -bind (IP), -port, -join (ip:port, optional).
// stdout: one JSON object per line: {"event":"join"|"leave"|"update",...},
// {"members":[...]} in answer to the stdin command "members",
// {"joinResult":{...}} in answer to "join ip:port" (and for -join), and the
// line READY once it is up. memberlist's own log goes to stderr.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/hashicorp/memberlist"
)

var outMu sync.Mutex

func out(v interface{}) {
	b, _ := json.Marshal(v)
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Println(string(b))
}

type member struct {
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	Port  uint16 `json:"port"`
	State string `json:"state,omitempty"`
	Vsn   []int  `json:"vsn"` // ints: encoding/json writes []uint8 as base64
}

func toMember(n *memberlist.Node) member {
	return member{Name: n.Name, Addr: n.Addr.String(), Port: n.Port, Vsn: []int{int(n.PMin), int(n.PMax), int(n.PCur), int(n.DMin), int(n.DMax), int(n.DCur)}}
}

type events struct{}

func (events) NotifyJoin(n *memberlist.Node) {
	out(map[string]interface{}{"event": "join", "member": toMember(n)})
}
func (events) NotifyLeave(n *memberlist.Node) {
	out(map[string]interface{}{"event": "leave", "member": toMember(n)})
}
func (events) NotifyUpdate(n *memberlist.Node) {
	out(map[string]interface{}{"event": "update", "member": toMember(n)})
}

func join(m *memberlist.Memberlist, addr string) {
	n, err := m.Join([]string{addr})
	res := map[string]interface{}{"joined": n}
	if err != nil {
		res["error"] = err.Error()
	}
	out(map[string]interface{}{"joinResult": res})
}

func main() {
	name := flag.String("name", "go-peer", "node name")
	bind := flag.String("bind", "127.0.0.1", "bind and advertise address")
	port := flag.Int("port", 7946, "UDP and TCP port")
	joinAddr := flag.String("join", "", "ip:port to join at start")
	flag.Parse()

	cfg := memberlist.DefaultLANConfig()
	cfg.Name = *name
	cfg.BindAddr = *bind
	cfg.BindPort = *port
	cfg.AdvertiseAddr = *bind
	cfg.AdvertisePort = *port
	cfg.Events = events{}
	cfg.LogOutput = os.Stderr

	m, err := memberlist.Create(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "create:", err)
		os.Exit(1)
	}
	if *joinAddr != "" {
		join(m, *joinAddr)
	}
	fmt.Println("READY")

	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		cmd := strings.TrimSpace(sc.Text())
		switch {
		case cmd == "members":
			list := []member{}
			for _, n := range m.Members() {
				list = append(list, toMember(n))
			}
			out(map[string]interface{}{"members": list})
		case strings.HasPrefix(cmd, "join "):
			join(m, strings.TrimPrefix(cmd, "join "))
		case cmd == "leave":
			m.Leave(0)
			m.Shutdown()
			out(map[string]interface{}{"left": true})
			os.Exit(0)
		}
	}
}
