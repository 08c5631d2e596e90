package override

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
)

// Limits bound what rendering one template may cost. text/template has
// no cancellation, so work is bounded before and during execution: the
// parse tree is costed up front (every node weighted by the ranges
// around it, ranges only over .Roles or a number, no template calls),
// the functions that can grow a string charge what they would build
// before building it, and the output goes through a writer that fails
// past the limit. The deadline is checked at each of those points.
type Limits struct {
	Output int           // bytes one file may render to, and may build in strings
	Work   int           // template nodes one file may execute, ranges multiplied out
	Time   time.Duration // wall clock one file may take
}

// The limits for override templates: far above what extending a few
// defaults takes, far below what would hurt a replica.
const (
	MaxTemplateOutput = 1 << 20
	MaxTemplateWork   = 100_000
	MaxTemplateTime   = 2 * time.Second
)

// templateFuncs are the functions a policy template may call: none of
// them builds more than its arguments hold, and print and println are
// replaced by budgeted versions.
var templateFuncs = []string{"and", "or", "not", "eq", "ne", "lt", "le", "gt", "ge", "len", "index", "slice", "print", "println"}

// budget is one rendering's spend, shared by the writer and the string
// functions.
type budget struct {
	name     string
	lim      Limits
	left     int
	deadline time.Time
	out      bytes.Buffer
	err      error // the first limit hit, reported instead of the executor's wrapping of it
}

func (b *budget) charge(n int) error {
	if b.err != nil {
		return b.err
	}
	if b.left -= n; b.left < 0 {
		b.err = fmt.Errorf("%s: template: renders to more than %d bytes, the limit per file", b.name, b.lim.Output)
	} else if time.Now().After(b.deadline) {
		b.err = fmt.Errorf("%s: template: takes longer than %s to render, the limit per file", b.name, b.lim.Time)
	}
	return b.err
}

func (b *budget) Write(p []byte) (int, error) {
	if err := b.charge(len(p)); err != nil {
		return 0, err
	}
	return b.out.Write(p)
}

// sizeOf is what fmt.Sprint makes of v, measured without building it
// when v is a string (the only kind that can be large here).
func sizeOf(v any) int {
	if s, ok := v.(string); ok {
		return len(s)
	}
	return len(fmt.Sprint(v))
}

func (b *budget) print(sep string, nl bool, fmtFn func(...any) string) func(...any) (string, error) {
	return func(args ...any) (string, error) {
		n := len(sep) * len(args)
		for _, a := range args {
			n += sizeOf(a)
		}
		if nl {
			n++
		}
		// Strings built for variables count against the output budget
		// too, so doubling a variable stops where the output would.
		if err := b.charge(n); err != nil {
			return "", err
		}
		return fmtFn(args...), nil
	}
}

func render(name string, src []byte) ([]byte, error) {
	return renderWithin(name, src, Limits{Output: MaxTemplateOutput, Work: MaxTemplateWork, Time: MaxTemplateTime})
}

func renderWithin(name string, src []byte, lim Limits) ([]byte, error) {
	b := &budget{name: name, lim: lim, left: lim.Output, deadline: time.Now().Add(lim.Time)}
	t := template.New(name).Option("missingkey=error").Funcs(template.FuncMap{
		"print":   b.print("", false, fmt.Sprint),
		"println": b.print(" ", true, fmt.Sprintln),
	})
	if _, err := t.Parse(string(src)); err != nil {
		return nil, fmt.Errorf("%s: template: %v", name, err)
	}
	if err := cost(name, t, lim.Work); err != nil {
		return nil, err
	}
	if err := t.Execute(b, TemplateData{Roles: []string{"admin", "manager", "member", "reader"}}); err != nil {
		if b.err != nil {
			return nil, b.err
		}
		return nil, fmt.Errorf("%s: template: %v", name, err)
	}
	return b.out.Bytes(), nil
}

// cost refuses a template that could do more than work steps before it
// runs: every node counts once per iteration of the ranges around it.
func cost(name string, t *template.Template, work int) error {
	if len(t.Templates()) > 1 {
		return fmt.Errorf("%s: template: define and block are not allowed in policy templates", name)
	}
	total := 0
	var walk func(n parse.Node, mult int) error
	walkList := func(l *parse.ListNode, mult int) error {
		if l == nil {
			return nil
		}
		for _, c := range l.Nodes {
			if err := walk(c, mult); err != nil {
				return err
			}
		}
		return nil
	}
	spend := func(n int) error {
		if total += n; total > work {
			return fmt.Errorf("%s: template: would execute more than %d steps (ranges nest too deep or run too long), the limit per file", name, work)
		}
		return nil
	}
	walk = func(n parse.Node, mult int) error {
		if err := spend(mult); err != nil {
			return err
		}
		switch n := n.(type) {
		case *parse.ListNode:
			return walkList(n, mult)
		case *parse.ActionNode:
			return pipeFuncs(name, n.Pipe)
		case *parse.IfNode:
			return walkBranch(&n.BranchNode, mult, walkList, name)
		case *parse.WithNode:
			return walkBranch(&n.BranchNode, mult, walkList, name)
		case *parse.RangeNode:
			if err := pipeFuncs(name, n.Pipe); err != nil {
				return err
			}
			k, err := rangeSize(name, n.Pipe)
			if err != nil {
				return err
			}
			if k > work {
				k = work + 1
			}
			if err := spend(mult * k); err != nil { // the iterations, even of an empty body
				return err
			}
			if err := walkList(n.List, mult*k); err != nil {
				return err
			}
			return walkList(n.ElseList, mult)
		case *parse.TemplateNode:
			return fmt.Errorf("%s: template: {{template}} is not allowed in policy templates", name)
		}
		return nil
	}
	return walk(t.Tree.Root, 1)
}

func walkBranch(b *parse.BranchNode, mult int, walkList func(*parse.ListNode, int) error, name string) error {
	if err := pipeFuncs(name, b.Pipe); err != nil {
		return err
	}
	if err := walkList(b.List, mult); err != nil {
		return err
	}
	return walkList(b.ElseList, mult)
}

// rangeSize is how many times a range may iterate: ranges go over the
// four roles or a literal number, nothing a template could make large.
func rangeSize(name string, p *parse.PipeNode) (int, error) {
	if len(p.Cmds) == 1 && len(p.Cmds[0].Args) == 1 {
		switch a := p.Cmds[0].Args[0].(type) {
		case *parse.FieldNode:
			if strings.Join(a.Ident, ".") == "Roles" {
				return 4, nil
			}
		case *parse.VariableNode:
			if strings.Join(a.Ident, ".") == "$.Roles" {
				return 4, nil
			}
		case *parse.NumberNode:
			if a.IsInt && a.Int64 >= 0 && a.Int64 <= 1<<30 {
				return int(a.Int64), nil
			}
		}
	}
	return 0, fmt.Errorf("%s: template: line %d: range over %s; policy templates may range only over .Roles or a number", name, p.Line, p)
}

// pipeFuncs refuses functions outside templateFuncs anywhere in a pipe.
func pipeFuncs(name string, p *parse.PipeNode) error {
	if p == nil {
		return nil
	}
	for _, c := range p.Cmds {
		for _, a := range c.Args {
			switch a := a.(type) {
			case *parse.IdentifierNode:
				if !slices.Contains(templateFuncs, a.Ident) {
					return fmt.Errorf("%s: template: line %d: function %s is not allowed in policy templates; they may use %s", name, p.Line, a.Ident, strings.Join(templateFuncs, ", "))
				}
			case *parse.PipeNode:
				if err := pipeFuncs(name, a); err != nil {
					return err
				}
			case *parse.ChainNode:
				if pn, ok := a.Node.(*parse.PipeNode); ok {
					if err := pipeFuncs(name, pn); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}
