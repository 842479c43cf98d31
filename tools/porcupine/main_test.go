package main

import (
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
)

func operation(client int, call, ret int64, in input, out output) porcupine.Operation {
	if ret < 0 {
		ret, out = math.MaxInt64, output{Unknown: true}
	}
	return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out}
}

func reg(s, p string) input { return input{Op: "register", Tree: "r", Session: s, Parent: p} }
func read(s string) input   { return input{Op: "read", Tree: "r", Session: s} }

func TestSequentialRunIsLinearizable(t *testing.T) {
	h := []porcupine.Operation{
		operation(0, 0, 1, reg("r", ""), output{Ok: true}),
		operation(0, 2, 3, reg("c", "r"), output{Ok: true}),
		operation(0, 4, 5, input{Op: "dispose", Tree: "r", Session: "r"}, output{Reason: "undisposed_children"}),
		operation(0, 6, 7, input{Op: "close", Tree: "r", Session: "r"}, output{Ok: true, Count: 2}),
		operation(0, 8, 9, reg("d", "c"), output{Reason: "admission_closed"}),
		operation(0, 10, 11, input{Op: "dispose", Tree: "r", Session: "c"}, output{Ok: true}),
		operation(0, 12, 13, input{Op: "dispose", Tree: "r", Session: "c"}, output{Ok: true, Already: true}),
		operation(0, 14, 15, read("c"), output{Ok: true, Found: true, Disposed: true, Closed: true, Epoch: 1}),
		operation(0, 16, 17, reg("e", ""), output{Ok: true}),
		operation(0, 18, 19, input{Op: "dispose", Tree: "r", Session: "e"}, output{Ok: true}),
		operation(0, 20, 21, read("e"), output{Ok: true, Found: true, Disposed: true, Closed: true, Epoch: 1}),
	}
	if !porcupine.CheckOperations(model, h) {
		t.Fatal("a sequential run of the model was refused")
	}
}

func TestAStaleReadIsNotLinearizable(t *testing.T) {
	h := []porcupine.Operation{
		operation(0, 0, 1, reg("r", ""), output{Ok: true}),
		operation(1, 2, 3, read("r"), output{Ok: true, Found: false}),
	}
	if porcupine.CheckOperations(model, h) {
		t.Fatal("a read after an acknowledged register that misses it was accepted")
	}
}

func TestALostAcknowledgedWriteIsNotLinearizable(t *testing.T) {
	h := []porcupine.Operation{
		operation(0, 0, 1, reg("r", ""), output{Ok: true}),
		operation(1, 2, 3, reg("r", ""), output{Ok: true}),
	}
	if porcupine.CheckOperations(model, h) {
		t.Fatal("two registrations of one id both accepted")
	}
}

func TestAnUnknownOutcomeMayOrMayNotHaveHappened(t *testing.T) {
	happened := []porcupine.Operation{
		operation(0, 0, -1, reg("r", ""), output{}),
		operation(1, 5, 6, read("r"), output{Ok: true, Found: true, Epoch: 1}),
	}
	notHappened := []porcupine.Operation{
		operation(0, 0, -1, reg("r", ""), output{}),
		operation(1, 5, 6, read("r"), output{Ok: true}),
	}
	if !porcupine.CheckOperations(model, happened) || !porcupine.CheckOperations(model, notHappened) {
		t.Fatal("an unknown outcome was taken as certain")
	}
}

func TestConcurrentOperationsMayOrderEitherWay(t *testing.T) {
	h := []porcupine.Operation{
		operation(0, 0, 10, reg("r", ""), output{Ok: true}),
		operation(1, 1, 9, read("r"), output{Ok: true}),
		operation(2, 2, 8, read("r"), output{Ok: true, Found: true, Epoch: 1}),
	}
	if !porcupine.CheckOperations(model, h) {
		t.Fatal("overlapping operations were not allowed to order either way")
	}
}

func claim(s string, epoch int) input { return input{Op: "claim", Tree: "r", Session: s, Epoch: epoch} }

func TestClaimsMoveTheEpochOneAtATime(t *testing.T) {
	h := []porcupine.Operation{
		operation(0, 0, 1, reg("r", ""), output{Ok: true}),
		operation(0, 2, 3, claim("r", 1), output{Ok: true, Epoch: 2}),
		operation(1, 4, 5, claim("r", 1), output{Reason: "epoch_mismatch"}),
		operation(1, 6, 7, read("r"), output{Ok: true, Found: true, Epoch: 2}),
		operation(0, 8, 9, input{Op: "dispose", Tree: "r", Session: "r"}, output{Ok: true}),
		operation(1, 10, 11, claim("r", 2), output{Reason: "session_disposed"}),
	}
	if !porcupine.CheckOperations(model, h) {
		t.Fatal("a sequential run of claims was refused")
	}
}

func TestTwoWinnersOfOneEpochAreNotLinearizable(t *testing.T) {
	// K1: a compare-and-swap on the epoch has one winner; two nodes both told they hold the
	// session at epoch 2 is the split brain fencing exists to prevent.
	h := []porcupine.Operation{
		operation(0, 0, 1, reg("r", ""), output{Ok: true}),
		operation(1, 2, 5, claim("r", 1), output{Ok: true, Epoch: 2}),
		operation(2, 3, 6, claim("r", 1), output{Ok: true, Epoch: 2}),
	}
	if porcupine.CheckOperations(model, h) {
		t.Fatal("two claims of the same epoch both won")
	}
}
