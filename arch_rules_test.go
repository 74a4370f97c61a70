package egrid_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The rules of STYLE.md and DESIGN.md §3 that the code itself can be checked for, with
// go/ast over the repository's files:
//
//   - actors share nothing and never block their mailbox: no sync.Mutex or sync.RWMutex
//     (no lock taken, no mutex declared) and no RequestFuture inside an actor's Receive — a
//     method named Receive whose one parameter is protoactor's actor.Context — nor inside the
//     unexported functions and methods of its package that only Receive reaches (called from
//     nowhere else, never used as a value). Code in a `go` statement runs off the mailbox and is not
//     checked, and neither are calls through fields or interfaces, which go/ast cannot follow;
//   - nor does it wait on storage there: no call of a method named like one of the I/O methods
//     (those taking a context.Context) of router/store's Store or of the dead-letter actor's
//     Outbox ([ioInterfaces]) in the same places — store reads, syncs, journal reads and outbox
//     writes run in a goroutine that sends its result back as a message. Without types the
//     rule goes by name: a call qualified by an imported package (rand.Read) is not one;
//   - tests do not sleep: no time.Sleep in a _test.go file outside testkit, which owns the
//     virtual clock (testkit.Advance).

// protoactorActor is the import path of protoactor's actor package.
const protoactorActor = "github.com/asynkron/protoactor-go/actor"

// ioInterfaces are the interfaces whose I/O methods an actor calls only off its mailbox: the
// router's store, and the dead-letter actor's outbox (kept in the store). Their methods taking
// a context.Context are the I/O ones (Store.Close and Outbox.NewID are not).
var ioInterfaces = []struct{ dir, name string }{
	{"router/store", "Store"},
	{"actors/deadletter", "Outbox"},
}

// ioMethods returns the I/O methods of ioInterfaces found in code, by name, each with the
// interface it belongs to ("store.Store").
func ioMethods(t *testing.T, code map[string][]*ast.File) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, want := range ioInterfaces {
		found := false
		for _, f := range code[filepath.FromSlash(want.dir)] {
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok || ts.Name.Name != want.name {
					return true
				}
				it, ok := ts.Type.(*ast.InterfaceType)
				if !ok {
					return false
				}
				found = true
				ctxPkg := importName(f, "context")
				for _, m := range it.Methods.List {
					ft, ok := m.Type.(*ast.FuncType)
					if !ok || len(m.Names) == 0 || len(ft.Params.List) == 0 || !isPkgSel(ft.Params.List[0].Type, ctxPkg, "Context") {
						continue
					}
					for _, name := range m.Names {
						out[name.Name] = f.Name.Name + "." + want.name
					}
				}
				return false
			})
		}
		if !found {
			t.Fatalf("interface %s not found in %s: update ioInterfaces", want.name, want.dir)
		}
	}
	return out
}

// lockMethods are the methods that take or release a sync.Mutex or sync.RWMutex.
var lockMethods = []string{"Lock", "Unlock", "RLock", "RUnlock", "TryLock", "TryRLock"}

// violation is one place where the code breaks a rule.
type violation struct {
	pos  token.Position
	what string
}

func (v violation) String() string {
	return fmt.Sprintf("%s:%d: %s", filepath.ToSlash(v.pos.Filename), v.pos.Line, v.what)
}

// sourceFile is one parsed file.
type sourceFile struct {
	path string // slash-separated, relative to the repository root
	file *ast.File
}

// importName returns the name under which f imports path ("" when it does not).
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return path[strings.LastIndex(path, "/")+1:]
		}
	}
	return ""
}

// isPkgSel reports whether e is pkg.name, with pkg not "".
func isPkgSel(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || pkg == "" {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg && sel.Sel.Name == name
}

// funcKey names a function of a package: "name", or "Type.name" for a method.
func funcKey(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	return recvType(fd) + "." + fd.Name.Name
}

// recvType is the base type name of fd's receiver.
func recvType(fd *ast.FuncDecl) string {
	t := fd.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr: // generic receiver
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// recvName is the name of fd's receiver variable ("" when it has none).
func recvName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 || len(fd.Recv.List[0].Names) == 0 {
		return ""
	}
	return fd.Recv.List[0].Names[0].Name
}

// isReceive reports whether fd is an actor's Receive: a method named Receive whose one
// parameter is protoactor's actor.Context.
func isReceive(fd *ast.FuncDecl, actorPkg string) bool {
	if fd.Recv == nil || fd.Name.Name != "Receive" || actorPkg == "" {
		return false
	}
	ps := fd.Type.Params.List
	return len(ps) == 1 && len(ps[0].Names) <= 1 && isPkgSel(ps[0].Type, actorPkg, "Context")
}

// pkgFunc is one function of a package with what the actor rules need to know about it.
type pkgFunc struct {
	decl    *ast.FuncDecl
	file    *ast.File
	receive bool
	callers map[string]bool // keys of the functions that call it on their own goroutine
	escapes bool            // used as a value, or called in a go statement
}

// walkOnMailbox calls visit for every node of body that runs on the caller's goroutine: it
// does not descend into go statements.
func walkOnMailbox(body ast.Node, visit func(ast.Node)) {
	ast.Inspect(body, func(n ast.Node) bool {
		if n == nil {
			return false
		}
		if _, ok := n.(*ast.GoStmt); ok {
			return false
		}
		visit(n)
		return true
	})
}

// checkActors applies the actor rules to the files of one package, with io the I/O methods
// (see [ioMethods]). It returns what it found and the functions it checked (the Receive methods
// and what only they reach).
func checkActors(fset *token.FileSet, files []*ast.File, io map[string]string) (out []violation, checked []string) {
	funcs := map[string]*pkgFunc{}
	for _, f := range files {
		actorPkg := importName(f, protoactorActor)
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				receive := isReceive(fd, actorPkg)
				// Other packages may call an exported name: who calls it is unknown.
				funcs[funcKey(fd)] = &pkgFunc{decl: fd, file: f, receive: receive, callers: map[string]bool{},
					escapes: !receive && fd.Name.IsExported()}
			}
		}
	}
	// Who calls whom, as far as names tell: f(...) is the package's function f, and r.m(...)
	// with r the caller's receiver is the method m of the caller's receiver type.
	for key, fn := range funcs {
		recv, typ := recvName(fn.decl), ""
		if fn.decl.Recv != nil {
			typ = recvType(fn.decl)
		}
		target := func(e ast.Expr) string {
			switch x := e.(type) {
			case *ast.Ident:
				if _, ok := funcs[x.Name]; ok {
					return x.Name
				}
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && recv != "" && id.Name == recv {
					if _, ok := funcs[typ+"."+x.Sel.Name]; ok {
						return typ + "." + x.Sel.Name
					}
				}
			}
			return ""
		}
		called := map[ast.Expr]bool{}
		// offMailbox marks what n calls or names as escaping: it runs on another goroutine (a go
		// statement) or whenever a function value is called.
		offMailbox := func(n ast.Node) {
			ast.Inspect(n, func(n ast.Node) bool {
				if e, ok := n.(ast.Expr); ok {
					if t := target(e); t != "" {
						funcs[t].escapes = true
					}
				}
				return true
			})
		}
		ast.Inspect(fn.decl.Body, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.GoStmt:
				offMailbox(x)
				return false
			case *ast.FuncLit:
				if !called[x] { // a function value: who calls it, and where, is unknown
					offMailbox(x.Body)
					return false
				}
			case *ast.CallExpr:
				if lit, ok := x.Fun.(*ast.FuncLit); ok {
					called[lit] = true // func() { ... }() runs here
				}
				if t := target(x.Fun); t != "" && !called[x.Fun] {
					funcs[t].callers[key] = true
					called[x.Fun] = true
				}
			case *ast.Ident, *ast.SelectorExpr:
				if e := x.(ast.Expr); !called[e] {
					if t := target(e); t != "" {
						funcs[t].escapes = true // a function value: who calls it is unknown
					}
				}
				if _, ok := x.(*ast.SelectorExpr); ok {
					return false
				}
			}
			return true
		})
	}
	// The functions only Receive reaches: grow from the Receive methods.
	reached := map[string]bool{}
	for key, fn := range funcs {
		if fn.receive {
			reached[key] = true
		}
	}
	for grew := true; grew; {
		grew = false
		for key, fn := range funcs {
			if reached[key] || fn.escapes || len(fn.callers) == 0 {
				continue
			}
			only := true
			for c := range fn.callers {
				only = only && reached[c]
			}
			if only {
				reached[key], grew = true, true
			}
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range reached {
			if !yield(k) {
				return
			}
		}
	})
	for _, key := range keys {
		fn := funcs[key]
		syncPkg := importName(fn.file, "sync")
		pkgs := map[string]bool{}
		for _, imp := range fn.file.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			pkgs[importName(fn.file, p)] = true
		}
		where := "in " + key
		if !fn.receive {
			where = "in " + key + ", which only Receive reaches"
		}
		walkOnMailbox(fn.decl.Body, func(n ast.Node) {
			switch x := n.(type) {
			case *ast.SelectorExpr:
				if isPkgSel(x, syncPkg, "Mutex") || isPkgSel(x, syncPkg, "RWMutex") {
					out = append(out, violation{fset.Position(x.Pos()), fmt.Sprintf("sync.%s %s: actors own their state and share nothing", x.Sel.Name, where)})
				}
			case *ast.CallExpr:
				sel, ok := x.Fun.(*ast.SelectorExpr)
				if !ok {
					return
				}
				switch {
				case sel.Sel.Name == "RequestFuture":
					out = append(out, violation{fset.Position(x.Pos()), "RequestFuture " + where + ": a future blocks the mailbox; send a message and handle the answer as one"})
				case slices.Contains(lockMethods, sel.Sel.Name):
					out = append(out, violation{fset.Position(x.Pos()), fmt.Sprintf("%s() %s: actors own their state and take no locks", sel.Sel.Name, where)})
				case io[sel.Sel.Name] != "":
					if id, ok := sel.X.(*ast.Ident); ok && pkgs[id.Name] {
						return // a package's function (rand.Read), not the method
					}
					out = append(out, violation{fset.Position(x.Pos()), fmt.Sprintf("%s() %s: %s I/O blocks the mailbox; run it in a goroutine and send the result back as a message", sel.Sel.Name, where, io[sel.Sel.Name])})
				}
			}
		})
	}
	return out, keys
}

// checkSleep reports the time.Sleep calls of a test file.
func checkSleep(fset *token.FileSet, f *ast.File) []violation {
	timePkg := importName(f, "time")
	var out []violation
	ast.Inspect(f, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok && isPkgSel(call.Fun, timePkg, "Sleep") {
			out = append(out, violation{fset.Position(call.Pos()), "time.Sleep in a test: move virtual time (testkit.Advance, synctest) or wait on a channel with a deadline"})
		}
		return true
	})
	return out
}

// repoFiles parses every Go file of the repository, by package directory.
func repoFiles(t *testing.T, fset *token.FileSet) (code map[string][]*ast.File, tests []sourceFile) {
	t.Helper()
	code = map[string][]*ast.File{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, "_test.go") {
			tests = append(tests, sourceFile{filepath.ToSlash(path), f})
		} else {
			code[filepath.Dir(path)] = append(code[filepath.Dir(path)], f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return code, tests
}

// TestActorsShareNothingAndNeverBlock fails for every lock, every RequestFuture and every
// store or outbox call inside an actor's Receive or the code only it reaches.
func TestActorsShareNothingAndNeverBlock(t *testing.T) {
	fset := token.NewFileSet()
	code, _ := repoFiles(t, fset)
	io := ioMethods(t, code)
	for _, m := range []string{"LoadSubscription", "Read", "UpdateSubscription", "Put"} {
		if io[m] == "" {
			t.Fatalf("the I/O methods %v lack %s; is ioMethods still reading the interfaces?", io, m)
		}
	}
	receives := 0
	for dir, files := range code {
		for _, f := range files {
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && isReceive(fd, importName(f, protoactorActor)) {
					receives++
				}
			}
		}
		vs, checked := checkActors(fset, files, io)
		for _, v := range vs {
			t.Error(v)
		}
		if len(checked) > 0 {
			t.Logf("%s: checked %s", filepath.ToSlash(dir), strings.Join(checked, ", "))
		}
	}
	if receives < 3 {
		t.Fatalf("found only %d actor Receive methods; is the checker still finding actors?", receives)
	}
}

// TestTestsDoNotSleep fails for every time.Sleep in a test outside testkit.
func TestTestsDoNotSleep(t *testing.T) {
	fset := token.NewFileSet()
	_, tests := repoFiles(t, fset)
	if len(tests) < 20 {
		t.Fatalf("found only %d test files; is the walk working?", len(tests))
	}
	for _, sf := range tests {
		if strings.HasPrefix(sf.path, "testkit/") {
			continue
		}
		for _, v := range checkSleep(fset, sf.file) {
			t.Error(v)
		}
	}
}

// badIO is what ioMethods would find for badActor.
var badIO = map[string]string{"LoadSubscription": "store.Store", "Read": "store.Store", "Put": "deadletter.Outbox"}

// badActor breaks every actor rule once, in the places the checker must look, and keeps them
// in the places it must not.
const badActor = `package bad

import (
	"context"
	"crypto/rand"
	"sync"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/store"
)

type counter struct {
	mu sync.Mutex
	n  int
	system *pa.ActorSystem
	other  *pa.PID
	st     store.Store
	outbox interface{ Put(context.Context, []int) error }
	buf    []byte
	later  func()
}

func (c *counter) Receive(ctx pa.Context) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	c.ask()
	c.both()
	helper()
	c.Exported()
	go c.background()
	go func() {
		c.mu.Lock()
		defer c.mu.Unlock()
	}()
	c.st.Read(context.Background(), "t", 1, 10)
	c.load()
	rand.Read(c.buf) // a package's function named like a store method
	go func() { c.st.LoadSubscription(context.Background(), "t", "s") }()
	c.later = func() { c.persist() } // a function value: persist runs who knows where
	c.spawnRead()
	func() { c.st.Read(context.Background(), "t", 1, 1) }() // called here: on the mailbox
}

// load is only reached from Receive.
func (c *counter) load() {
	c.st.LoadSubscription(context.Background(), "t", "s")
	c.outbox.Put(context.Background(), nil)
}

// persist is only named in a function value.
func (c *counter) persist() { c.st.Read(context.Background(), "t", 1, 1) }

// spawnRead reads in a goroutine.
func (c *counter) spawnRead() { go func() { c.readNow() }() }

// readNow is only called off the mailbox.
func (c *counter) readNow() { c.st.Read(context.Background(), "t", 1, 1) }

// ask is only reached from Receive.
func (c *counter) ask() {
	c.system.Root.RequestFuture(c.other, "hi", time.Second).Result()
	var m sync.RWMutex
	_ = &m
	c.deeper()
}

// deeper is only reached through ask.
func (c *counter) deeper() { c.mu.TryLock() }

// both is also called from elsewhere, so it is not the mailbox's alone.
func (c *counter) both() { c.mu.Lock() }

func (c *counter) Public() { c.both() }

// Exported is only called from Receive here, but other packages may call it.
func (c *counter) Exported() { c.mu.Lock() }

// helper is a package function only Receive calls.
func helper() { var mu sync.Mutex; mu.Lock() }

// background runs off the mailbox.
func (c *counter) background() { c.mu.Lock() }

// notAnActor has a Receive of another shape.
type notAnActor struct{ mu sync.Mutex }

func (a *notAnActor) Receive(msg any) { a.mu.Lock() }
`

// TestActorRuleChecker runs the checker on badActor: it must report exactly the breaks in
// Receive and in what only Receive reaches.
func TestActorRuleChecker(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "bad.go", badActor, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	vs, _ := checkActors(fset, []*ast.File{f}, badIO)
	for _, v := range vs {
		got = append(got, strings.SplitN(v.what, ":", 2)[0])
	}
	slices.Sort(got)
	want := []string{
		"Lock() in counter.Receive",
		"Unlock() in counter.Receive",
		"RequestFuture in counter.ask, which only Receive reaches",
		"sync.RWMutex in counter.ask, which only Receive reaches",
		"TryLock() in counter.deeper, which only Receive reaches",
		"Lock() in helper, which only Receive reaches",
		"sync.Mutex in helper, which only Receive reaches",
		"Read() in counter.Receive",
		"Read() in counter.Receive",
		"LoadSubscription() in counter.load, which only Receive reaches",
		"Put() in counter.load, which only Receive reaches",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the checker reported:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestSleepChecker runs the sleep checker on a small test file.
func TestSleepChecker(t *testing.T) {
	const src = `package x_test

import (
	"testing"
	clock "time"
)

func TestSlow(t *testing.T) {
	clock.Sleep(clock.Second)
	t.Log("time." + "Sleep(1) is text here, not a call")
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x_test.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	vs := checkSleep(fset, f)
	if len(vs) != 1 || vs[0].pos.Line != 9 {
		t.Errorf("checkSleep found %v; want the one call on line 9", vs)
	}
}
