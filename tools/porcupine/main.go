// Command porcupine checks a history of lineage registry operations for linearizability with
// Porcupine (github.com/anishathalye/porcupine), a checker lineage did not write (issue 12).
//
// Input (a file, or stdin): {"operations": [OP, ...]}, each OP
//
//	{"client": 0, "call": <ns>, "return": <ns, or -1 when the outcome is unknown>,
//	 "input":  {"op": "register"|"dispose"|"close"|"claim"|"read", "tree": ROOT, "session": ID,
//	            "parent": ID, "epoch": <a claim's expected epoch>},
//	 "output": {"ok": bool, "reason": "<refusal>", "already": bool, "count": n,
//	            "found": bool, "disposed": bool, "closed": bool, "epoch": <placement epoch>}}
//
// The model is the registry's rules for the commands the chaos workload sends (register a root
// or a child, placed at epoch 1; dispose leaves first; close admission on a subtree; claim the
// placement by compare-and-swap on its epoch, K1's fencing; read one record), sequential
// and pure; a history is linearizable when some order of its operations, each placed between
// its call and its return, is a run of the model. An operation whose outcome is unknown (the
// client gave up) may have taken effect at any time after its call, or never. Histories are
// partitioned by tree: no operation reads or writes across trees.
//
// Exit 0 and "linearizable: N operations in M trees"; exit 1 and the first tree that is not,
// with its operations; exit 2 on bad input.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

type input struct {
	Op      string `json:"op"`
	Tree    string `json:"tree"`
	Session string `json:"session"`
	Parent  string `json:"parent,omitempty"`
	Epoch   int    `json:"epoch,omitempty"`
}

type output struct {
	Unknown  bool   `json:"unknown,omitempty"`
	Ok       bool   `json:"ok"`
	Reason   string `json:"reason,omitempty"`
	Already  bool   `json:"already,omitempty"`
	Count    int    `json:"count,omitempty"`
	Found    bool   `json:"found,omitempty"`
	Disposed bool   `json:"disposed,omitempty"`
	Closed   bool   `json:"closed,omitempty"`
	Epoch    int    `json:"epoch,omitempty"`
}

type op struct {
	Client int    `json:"client"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	Input  input  `json:"input"`
	Output output `json:"output"`
}

type history struct {
	Operations []op `json:"operations"`
}

// record is one session of the model.
type record struct {
	Parent   string `json:"p,omitempty"`
	Disposed bool   `json:"d,omitempty"`
	Closed   bool   `json:"c,omitempty"`
	Epoch    int    `json:"e,omitempty"`
}

// state is the model's state, encoded canonically (sorted keys) so that equal states compare
// equal as strings.
type state map[string]record

func decode(s interface{}) state {
	out := state{}
	if text, ok := s.(string); ok && text != "" {
		_ = json.Unmarshal([]byte(text), &out)
	}
	return out
}

func (st state) encode() string {
	keys := make([]string, 0, len(st))
	for k := range st {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(st[k])
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.String()
}

func (st state) copy() state {
	out := make(state, len(st))
	for k, v := range st {
		out[k] = v
	}
	return out
}

// subtree lists session and its descendants.
func (st state) subtree(session string) []string {
	out := []string{session}
	for i := 0; i < len(out); i++ {
		for id, r := range st {
			if r.Parent == out[i] {
				out = append(out, id)
			}
		}
	}
	return out
}

// apply runs one operation on the model: the outcomes it may give (refusal reasons that apply,
// or "" for success) and the state after a success.
func apply(st state, in input) (reasons map[string]bool, next state, result output) {
	reasons = map[string]bool{}
	switch in.Op {
	case "register":
		if _, ok := st[in.Session]; ok {
			reasons["duplicate_session"] = true
		}
		if in.Parent != "" {
			parent, ok := st[in.Parent]
			if !ok {
				reasons["parent_missing"] = true
			} else {
				if parent.Disposed {
					reasons["parent_disposed"] = true
				}
				if parent.Closed {
					reasons["admission_closed"] = true
				}
			}
		}
		if len(reasons) > 0 {
			return reasons, st, output{}
		}
		next = st.copy()
		next[in.Session] = record{Parent: in.Parent, Epoch: 1}
		return nil, next, output{Ok: true}
	case "dispose":
		r, ok := st[in.Session]
		if !ok {
			reasons["unknown_session"] = true
			return reasons, st, output{}
		}
		if r.Disposed {
			return nil, st, output{Ok: true, Already: true}
		}
		for _, id := range st.subtree(in.Session)[1:] {
			if st[id].Parent == in.Session && !st[id].Disposed {
				reasons["undisposed_children"] = true
				return reasons, st, output{}
			}
		}
		next = st.copy()
		// A disposed session takes no children: disposal also closes its admission.
		r.Disposed = true
		r.Closed = true
		next[in.Session] = r
		return nil, next, output{Ok: true}
	case "close":
		if _, ok := st[in.Session]; !ok {
			reasons["unknown_session"] = true
			return reasons, st, output{}
		}
		next = st.copy()
		ids := st.subtree(in.Session)
		for _, id := range ids {
			r := next[id]
			r.Closed = true
			next[id] = r
		}
		return nil, next, output{Ok: true, Count: len(ids)}
	case "claim":
		r, ok := st[in.Session]
		switch {
		case !ok:
			reasons["unknown_session"] = true
		case r.Disposed:
			reasons["session_disposed"] = true
		case r.Epoch != in.Epoch:
			reasons["epoch_mismatch"] = true
		}
		if len(reasons) > 0 {
			return reasons, st, output{}
		}
		next = st.copy()
		r.Epoch++
		next[in.Session] = r
		return nil, next, output{Ok: true, Epoch: r.Epoch}
	case "read":
		r, ok := st[in.Session]
		return nil, st, output{Ok: true, Found: ok, Disposed: r.Disposed, Closed: r.Closed, Epoch: r.Epoch}
	}
	reasons["unknown_op:"+in.Op] = true
	return reasons, st, output{}
}

var model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byTree := map[string][]porcupine.Operation{}
		var trees []string
		for _, o := range h {
			t := o.Input.(input).Tree
			if _, ok := byTree[t]; !ok {
				trees = append(trees, t)
			}
			byTree[t] = append(byTree[t], o)
		}
		out := make([][]porcupine.Operation, 0, len(trees))
		for _, t := range trees {
			out = append(out, byTree[t])
		}
		return out
	},
	Init: func() interface{} { return state{}.encode() },
	Step: func(s, i, o interface{}) (bool, interface{}) {
		st, in, out := decode(s), i.(input), o.(output)
		reasons, next, want := apply(st, in)
		if out.Unknown {
			// It may have happened here (then with the model's outcome).
			return true, next.encode()
		}
		if len(reasons) > 0 {
			return !out.Ok && reasons[out.Reason], s
		}
		return out == want, next.encode()
	},
	DescribeOperation: func(i, o interface{}) string {
		in, out := i.(input), o.(output)
		return fmt.Sprintf("%s(%s<-%s) -> %+v", in.Op, in.Session, in.Parent, out)
	},
}

func main() {
	var r io.Reader = os.Stdin
	if len(os.Args) > 1 {
		f, err := os.Open(os.Args[1])
		if err != nil {
			fmt.Fprintf(os.Stderr, "porcupine: cannot open %s: %v\n", os.Args[1], err)
			os.Exit(2)
		}
		defer f.Close()
		r = f
	}
	var h history
	if err := json.NewDecoder(r).Decode(&h); err != nil {
		fmt.Fprintf(os.Stderr, "porcupine: the history is not {\"operations\": [...]}: %v\n", err)
		os.Exit(2)
	}
	ops := make([]porcupine.Operation, 0, len(h.Operations))
	trees := map[string]bool{}
	for _, o := range h.Operations {
		ret := o.Return
		out := o.Output
		if ret < 0 {
			ret = math.MaxInt64
			out = output{Unknown: true}
		}
		trees[o.Input.Tree] = true
		ops = append(ops, porcupine.Operation{ClientId: o.Client, Input: o.Input, Call: o.Call, Output: out, Return: ret})
	}
	result, info := porcupine.CheckOperationsVerbose(model, ops, 60*time.Second)
	switch result {
	case porcupine.Ok:
		fmt.Printf("linearizable: %d operations in %d trees\n", len(ops), len(trees))
	case porcupine.Unknown:
		fmt.Printf("unknown: the check timed out after 60 s (%d operations)\n", len(ops))
		os.Exit(1)
	default:
		fmt.Printf("NOT linearizable (%d operations in %d trees)\n", len(ops), len(trees))
		// The smallest reproduction: the first tree whose own history is not linearizable.
		for _, part := range model.Partition(ops) {
			if porcupine.CheckOperations(model, part) {
				continue
			}
			sort.Slice(part, func(a, b int) bool { return part[a].Call < part[b].Call })
			fmt.Printf("tree %s, %d operations:\n", part[0].Input.(input).Tree, len(part))
			for _, o := range part {
				ret := "?"
				if o.Return != math.MaxInt64 {
					ret = fmt.Sprint(o.Return)
				}
				fmt.Printf("  client %d [%d, %s] %s\n", o.ClientId, o.Call, ret, model.DescribeOperation(o.Input, o.Output))
			}
			break
		}
		if path := os.Getenv("PORCUPINE_VISUALIZE"); path != "" {
			if f, err := os.Create(path); err == nil {
				_ = porcupine.Visualize(model, info, f)
				f.Close()
				fmt.Printf("visualization: %s\n", path)
			}
		}
		os.Exit(1)
	}
}
