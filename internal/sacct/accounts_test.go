package sacct

import (
	"os"
	"path/filepath"

	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// From the test cluster (scripts/slurm.sh), with a parent account added.
const sacctmgrAssoc = `Account|ParentName|User|Cluster
root|||gpumeter
root||root|gpumeter
sciences|root||gpumeter
physics|sciences||gpumeter
physics||gpumeter-ada|gpumeter
particle|physics||gpumeter
chemistry|sciences||gpumeter
chemistry||gpumeter-bob|gpumeter
astro|root||gpumeter
astro||gpumeter-dan|gpumeter
`

func TestAccountsAncestor(t *testing.T) {
	acc, err := ParseAccounts(strings.NewReader(sacctmgrAssoc))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		account string
		level   int
		want    string
		ok      bool
	}{
		{"physics", 1, "sciences", true},
		{"particle", 1, "sciences", true},
		{"particle", 2, "physics", true},
		{"particle", 3, "particle", true},
		{"particle", 9, "particle", true}, // no deeper than the account itself
		{"astro", 1, "astro", true},       // a top-level account is its own department
		{"sciences", 2, "sciences", true},
		{"gpumeter-ada", 1, "", false}, // a user, not an account
		{"unknown", 1, "", false},
		{"physics", 0, "", false},
	}
	for _, tt := range tests {
		got, ok := acc.Ancestor(tt.account, tt.level)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Ancestor(%q, %d) = %q, %v; want %q, %v", tt.account, tt.level, got, ok, tt.want, tt.ok)
		}
	}
}

func TestAccountsDepartments(t *testing.T) {
	acc, err := ParseAccounts(strings.NewReader(sacctmgrAssoc))
	if err != nil {
		t.Fatal(err)
	}
	got := acc.Departments(1)
	want := map[string]string{"sciences": "sciences", "physics": "sciences", "particle": "sciences", "chemistry": "sciences", "astro": "astro"}
	if len(got) != len(want) {
		t.Fatalf("Departments(1) = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Departments(1)[%s] = %q, want %q", k, got[k], v)
		}
	}
}

func TestParseAccountsOlderHeader(t *testing.T) {
	acc, err := ParseAccounts(strings.NewReader("Cluster|Account|User|Partition|Par Name|Share\nc|root||||1\nc|bio||||1\nc|bio||||1\n"))
	if err == nil {
		t.Fatalf("an account without a parent was accepted: %+v", acc)
	}
	acc, err = ParseAccounts(strings.NewReader("Cluster|Account|User|Partition|Par Name|Share\nc|root||||1\nc|bio|||root|1\nc|bio|ann|||1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := acc.Ancestor("bio", 1); !ok || got != "bio" {
		t.Errorf("Ancestor(bio) = %q, %v", got, ok)
	}
}

func TestParseAccountsRefusesBadInput(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"empty", "", "no header"},
		{"no parent column", "Account|User\nphysics|\n", "ParentName: column missing"},
		{"own parent", "Account|ParentName|User\nphysics|physics|\n", "its own parent"},
		{"two parents", "Account|ParentName|User\nphysics|a|\nphysics|b|\n", `parent "b" here and "a" before`},
		{"cycle", "Account|ParentName|User\na|b|\nb|a|\n", "cycle"},
		{"empty account", "Account|ParentName|User\n|root|\n", "line 2: Account: empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseAccounts(strings.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestReadAccountsFileNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "assoc.txt"), filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(good, []byte(sacctmgrAssoc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("Account|ParentName|User\n|root|\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if acc, err := ReadAccountsFile(good); err != nil {
		t.Fatal(err)
	} else if got, ok := acc.Ancestor("particle", 1); !ok || got != "sciences" {
		t.Errorf("Ancestor(particle, 1) = %q, %v", got, ok)
	}
	for _, path := range []string{bad, filepath.Join(dir, "missing.txt")} {
		_, err := ReadAccountsFile(path)
		if !fault.IsValidation(err) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want a validation error naming the file", path, err)
		}
	}
}
