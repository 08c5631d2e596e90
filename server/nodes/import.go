package nodes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/store"
)

// ImportRecord is one node of an enrolment file and the line it started on.
type ImportRecord struct {
	Line   int
	Node   CreateInput
	Traits []string
}

// LineError is one problem in an enrolment file.
type LineError struct {
	Line int
	Msg  string
}

func (e LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// ImportErrors is every problem found, so an operator fixes a file in one
// pass rather than one error at a time.
type ImportErrors []LineError

func (e ImportErrors) Error() string {
	var b strings.Builder
	for i, le := range e {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(le.Error())
	}
	return b.String()
}

// importNode is the JSON form of one node in an enrolment file; it is the
// API's create body plus traits, so files written for Ironic work.
type importNode struct {
	UUID          string         `json:"uuid"`
	Name          *string        `json:"name"`
	Driver        string         `json:"driver"`
	DriverInfo    map[string]any `json:"driver_info"`
	Properties    map[string]any `json:"properties"`
	Extra         map[string]any `json:"extra"`
	Owner         string         `json:"owner"`
	Lessee        string         `json:"lessee"`
	ResourceClass *string        `json:"resource_class"`
	Description   *string        `json:"description"`
	Traits        []string       `json:"traits"`
}

// ParseImport reads a JSON (a list, or {"nodes": [...]}) or CSV enrolment
// file and validates every record, reporting all problems with their lines.
func ParseImport(r io.Reader, format string) ([]ImportRecord, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if format == "" {
		format = "csv"
		if t := bytes.TrimSpace(data); len(t) > 0 && (t[0] == '[' || t[0] == '{') {
			format = "json"
		}
	}
	var recs []ImportRecord
	var bad ImportErrors
	switch format {
	case "json":
		recs, bad = parseJSON(data)
	case "csv":
		recs, bad = parseCSV(data)
	default:
		return nil, fmt.Errorf("unknown format %q: use csv or json", format)
	}
	bad = append(bad, validateRecords(recs)...)
	if len(bad) > 0 {
		return nil, bad
	}
	return recs, nil
}

func lineAt(data []byte, off int64) int { return bytes.Count(data[:off], []byte("\n")) + 1 }

func parseJSON(data []byte) ([]ImportRecord, ImportErrors) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, ImportErrors{{1, "not JSON: " + err.Error()}}
	}
	if tok == json.Delim('{') {
		// {"nodes": [...]}: step to the list.
		if k, err := dec.Token(); err != nil || k != "nodes" {
			return nil, ImportErrors{{lineAt(data, dec.InputOffset()), `expected {"nodes": [...]} or a list of nodes`}}
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, ImportErrors{{lineAt(data, dec.InputOffset()), err.Error()}}
		}
	}
	if tok != json.Delim('[') {
		return nil, ImportErrors{{lineAt(data, dec.InputOffset()), "expected a list of nodes"}}
	}
	var recs []ImportRecord
	var bad ImportErrors
	for dec.More() {
		start := dec.InputOffset()
		// Skip the separator and whitespace so the line is the object's own.
		for start < int64(len(data)) && strings.ContainsRune(", \t\r\n", rune(data[start])) {
			start++
		}
		line := lineAt(data, start)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return recs, append(bad, LineError{line, "not JSON: " + err.Error()})
		}
		var n importNode
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := d.Decode(&n); err != nil {
			bad = append(bad, LineError{line, err.Error()})
			continue
		}
		recs = append(recs, ImportRecord{Line: line, Traits: n.Traits, Node: CreateInput{
			UUID: n.UUID, Name: n.Name, Driver: n.Driver, DriverInfo: n.DriverInfo, Properties: n.Properties,
			Extra: n.Extra, Owner: n.Owner, Lessee: n.Lessee, ResourceClass: n.ResourceClass, Description: n.Description,
		}})
	}
	return recs, bad
}

// parseCSV reads a header row and one node per row. Columns named
// driver_info.KEY, properties.KEY and extra.KEY fill those maps; traits is
// a ;-separated list.
func parseCSV(data []byte) ([]ImportRecord, ImportErrors) {
	cr := csv.NewReader(bufio.NewReader(bytes.NewReader(data)))
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err != nil {
		return nil, ImportErrors{{1, "no header row: " + err.Error()}}
	}
	for i, h := range head {
		head[i] = strings.TrimSpace(h)
		switch {
		case map[string]bool{"uuid": true, "name": true, "driver": true, "owner": true, "lessee": true, "resource_class": true, "description": true, "traits": true}[head[i]]:
		case strings.HasPrefix(head[i], "driver_info."), strings.HasPrefix(head[i], "properties."), strings.HasPrefix(head[i], "extra."):
		default:
			return nil, ImportErrors{{1, fmt.Sprintf("unknown column %q", head[i])}}
		}
	}
	var recs []ImportRecord
	var bad ImportErrors
	for {
		row, err := cr.Read()
		if err == io.EOF {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			bad = append(bad, LineError{line, err.Error()})
			continue
		}
		if len(row) != len(head) {
			bad = append(bad, LineError{line, fmt.Sprintf("%d columns, the header has %d", len(row), len(head))})
			continue
		}
		rec := ImportRecord{Line: line, Node: CreateInput{DriverInfo: map[string]any{}, Properties: map[string]any{}, Extra: map[string]any{}}}
		for i, v := range row {
			if v == "" {
				continue
			}
			switch h := head[i]; h {
			case "uuid":
				rec.Node.UUID = v
			case "name":
				rec.Node.Name = &row[i]
			case "driver":
				rec.Node.Driver = v
			case "owner":
				rec.Node.Owner = v
			case "lessee":
				rec.Node.Lessee = v
			case "resource_class":
				rec.Node.ResourceClass = &row[i]
			case "description":
				rec.Node.Description = &row[i]
			case "traits":
				rec.Traits = strings.Split(v, ";")
			default:
				m, k, _ := strings.Cut(h, ".")
				dst := map[string]map[string]any{"driver_info": rec.Node.DriverInfo, "properties": rec.Node.Properties, "extra": rec.Node.Extra}[m]
				dst[k] = csvValue(v)
			}
		}
		recs = append(recs, rec)
	}
	return recs, bad
}

// csvValue keeps numbers numeric so properties such as cpus stay integers.
func csvValue(v string) any {
	if i, err := strconv.ParseInt(v, 10, 64); err == nil {
		return i
	}
	return v
}

func validateRecords(recs []ImportRecord) ImportErrors {
	var bad ImportErrors
	names, uuids := map[string]int{}, map[string]int{}
	for i := range recs {
		r := &recs[i]
		if err := ValidateCreate(&r.Node); err != nil {
			bad = append(bad, LineError{r.Line, fieldMsg(err)})
			continue
		}
		if err := ValidateTraits(r.Traits); err != nil {
			bad = append(bad, LineError{r.Line, err.Error()})
		}
		if prev, ok := uuids[r.Node.UUID]; ok {
			bad = append(bad, LineError{r.Line, fmt.Sprintf("uuid %s repeats line %d", r.Node.UUID, prev)})
		}
		uuids[r.Node.UUID] = r.Line
		if r.Node.Name != nil {
			if prev, ok := names[*r.Node.Name]; ok {
				bad = append(bad, LineError{r.Line, fmt.Sprintf("name %s repeats line %d", *r.Node.Name, prev)})
			}
			names[*r.Node.Name] = r.Line
		}
	}
	return bad
}

func fieldMsg(err error) string {
	if f := errs.FieldOf(err); f != "" && !strings.Contains(err.Error(), f) {
		return f + ": " + err.Error()
	}
	return err.Error()
}

// importBatch bounds rows per INSERT below SQLite's bound-variable limit.
const importBatch = 400

// Import enrols all records in one transaction: either every node is
// created or none is. Names and UUIDs already in the database are reported
// with the lines that repeat them.
func Import(ctx context.Context, db *store.DB, recs []ImportRecord) error {
	if bad := clashes(ctx, db, recs); len(bad) > 0 {
		return bad
	}
	err := store.WithTx(ctx, db, func(tx *ent.Client) error {
		for start := 0; start < len(recs); start += importBatch {
			part := recs[start:min(start+importBatch, len(recs))]
			bulk := make([]*ent.NodeCreate, len(part))
			for i, r := range part {
				in := r.Node
				bulk[i] = tx.Node.Create().SetUUID(in.UUID).SetNillableName(in.Name).SetDriver(in.Driver).
					SetDriverInfo(in.DriverInfo).SetProperties(in.Properties).SetExtra(in.Extra).
					SetInstanceInfo(map[string]any{}).SetOwner(in.Owner).SetLessee(in.Lessee).
					SetNillableResourceClass(in.ResourceClass).SetNillableDescription(in.Description).
					SetProvisionState(in.ProvisionState)
			}
			created, err := tx.Node.CreateBulk(bulk...).Save(ctx)
			if err != nil {
				return fmt.Errorf("lines %d–%d: %w", part[0].Line, part[len(part)-1].Line, err)
			}
			var traits []*ent.TraitCreate
			for i, n := range created {
				for _, t := range part[i].Traits {
					traits = append(traits, tx.Trait.Create().SetNodeID(n.ID).SetTrait(t))
				}
			}
			for ts := 0; ts < len(traits); ts += importBatch {
				if err := tx.Trait.CreateBulk(traits[ts:min(ts+importBatch, len(traits))]...).Exec(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The nodes are listed next, by servers whose statistics may still
	// describe the fleet before the import.
	return db.Analyze(ctx)
}

func clashes(ctx context.Context, db *store.DB, recs []ImportRecord) ImportErrors {
	var bad ImportErrors
	for start := 0; start < len(recs); start += importBatch {
		part := recs[start:min(start+importBatch, len(recs))]
		var ids, names []string
		line := map[string]int{}
		for _, r := range part {
			ids = append(ids, r.Node.UUID)
			line["u"+r.Node.UUID] = r.Line
			if r.Node.Name != nil {
				names = append(names, *r.Node.Name)
				line["n"+*r.Node.Name] = r.Line
			}
		}
		found, err := db.Node.Query().Where(node.Or(node.UUIDIn(ids...), node.NameIn(names...))).All(ctx)
		if err != nil {
			return ImportErrors{{part[0].Line, err.Error()}}
		}
		for _, n := range found {
			if l, ok := line["u"+n.UUID]; ok {
				bad = append(bad, LineError{l, fmt.Sprintf("a node with uuid %s already exists", n.UUID)})
			}
			if n.Name != nil {
				if l, ok := line["n"+*n.Name]; ok {
					bad = append(bad, LineError{l, fmt.Sprintf("a node named %s already exists", *n.Name)})
				}
			}
		}
	}
	return bad
}
