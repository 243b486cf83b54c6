package sacct

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/importer"
)

// Accounts is Slurm's account hierarchy: each account's parent, as
// `sacctmgr --parsable2 show assoc format=Account,ParentName,User` lists
// it ("root" at the top).
type Accounts struct {
	parent map[string]string
}

// ParseAccounts reads `sacctmgr --parsable2 show assoc
// format=Account,ParentName[,User,...]` output: a header naming at least
// Account and ParentName ("Par Name" in the default format), then one
// association per line. Account associations (no user) give the parent;
// user associations are skipped. Problems name the line and field; an
// account with two parents or a cycle is refused.
func ParseAccounts(r io.Reader) (Accounts, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), MaxLineBytes)
	var ps problems
	acc := Accounts{parent: map[string]string{}}
	col := map[string]int{}
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(text) == "" {
			continue
		}
		fields := strings.Split(text, "|")
		if len(col) == 0 {
			for i, f := range fields {
				name := strings.TrimSpace(f)
				if name == "Par Name" {
					name = "ParentName"
				}
				col[name] = i
			}
			for _, need := range []string{"Account", "ParentName"} {
				if _, ok := col[need]; !ok {
					ps.add(line, need, "column missing from the header: run sacctmgr --parsable2 show assoc format=Account,ParentName,User")
				}
			}
			if len(ps.Problems) > 0 {
				return Accounts{}, ps.err()
			}
			continue
		}
		get := func(name string) string {
			i, ok := col[name]
			if !ok || i >= len(fields) {
				return ""
			}
			return strings.TrimSpace(fields[i])
		}
		if get("User") != "" {
			continue
		}
		account, parent := get("Account"), get("ParentName")
		switch {
		case account == "":
			ps.add(line, "Account", "empty")
			continue
		case account == "root" && parent == "":
			continue
		case parent == "":
			ps.add(line, "ParentName", fmt.Sprintf("empty for account %q (only root has no parent)", account))
			continue
		case parent == account:
			ps.add(line, "ParentName", fmt.Sprintf("account %q is its own parent", account))
			continue
		}
		if prev, ok := acc.parent[account]; ok && prev != parent {
			// One hierarchy per export: several clusters' associations
			// with different parents would make a department ambiguous.
			ps.add(line, "ParentName", fmt.Sprintf("account %q has parent %q here and %q before (export one cluster: where cluster=NAME)", account, parent, prev))
			continue
		}
		acc.parent[account] = parent
	}
	if err := sc.Err(); err != nil {
		return Accounts{}, fmt.Errorf("read sacctmgr output: line %d: %w", line+1, err)
	}
	if len(col) == 0 {
		ps.add(1, "Account", "no header: empty input")
	}
	for _, account := range slices.Sorted(maps.Keys(acc.parent)) {
		if _, err := acc.path(account); err != nil {
			ps.add(line, "ParentName", err.Error())
			break // one cycle names every account on it: say it once
		}
	}
	if len(ps.Problems) > 0 {
		return Accounts{}, ps.err()
	}
	return acc, nil
}

// path is the account's chain of ancestors from the top (below root) down
// to the account itself.
func (a Accounts) path(account string) ([]string, error) {
	var chain []string
	seen := map[string]bool{}
	for cur := account; cur != "root"; {
		if seen[cur] {
			return nil, fmt.Errorf("account %q: its parents form a cycle", account)
		}
		seen[cur] = true
		chain = append(chain, cur)
		p, ok := a.parent[cur]
		if !ok {
			break // a parent without its own line: the top we know
		}
		cur = p
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return chain, nil
}

// Known reports whether the hierarchy lists the account.
func (a Accounts) Known(account string) bool {
	_, ok := a.parent[account]
	return ok
}

// Ancestor is the account's ancestor at depth level below root (1: the
// top-level account), or the account itself when it is no deeper than
// that. False for an account the hierarchy does not list.
func (a Accounts) Ancestor(account string, level int) (string, bool) {
	if !a.Known(account) || level < 1 {
		return "", false
	}
	chain, err := a.path(account)
	if err != nil || len(chain) == 0 {
		return "", false
	}
	if level > len(chain) {
		level = len(chain)
	}
	return chain[level-1], true
}

// Departments maps every account the hierarchy lists to its ancestor at
// level (Ancestor): the chargeback's departments when tenants are Slurm
// accounts.
func (a Accounts) Departments(level int) map[string]string {
	out := map[string]string{}
	for account := range a.parent {
		if d, ok := a.Ancestor(account, level); ok {
			out[account] = d
		}
	}
	return out
}

// ReadAccountsFile reads sacctmgr's association listing from a file; its
// problems name the file, line and field, and are validation errors (as
// is a file that cannot be opened: the caller named it).
func ReadAccountsFile(path string) (Accounts, error) {
	f, err := os.Open(path)
	if err != nil {
		return Accounts{}, fault.Validation(err)
	}
	defer f.Close()
	acc, err := ParseAccounts(f)
	var ve *importer.ValidationError
	switch {
	case errors.As(err, &ve):
		return Accounts{}, ve.InFile(path)
	case err != nil:
		return Accounts{}, fault.Validation(fmt.Errorf("%s: %w", path, err))
	}
	return acc, nil
}
