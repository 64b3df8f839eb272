package detect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wantTable is the upstream table written out independently of tables.go,
// so that a mistaken edit there fails here.
var wantCommands = map[string]string{
	"node": "node:22-alpine", "npm": "node:22-alpine", "npx": "node:22-alpine", "yarn": "node:22-alpine",
	"pnpm": "node:22-alpine", "bun": "node:22-alpine", "tsx": "node:22-alpine", "ts-node": "node:22-alpine",
	"cargo": "rust:1.85-alpine", "rustc": "rust:1.85-alpine", "rustup": "rust:1.85-alpine",
	"rustfmt": "rust:1.85-alpine", "clippy": "rust:1.85-alpine",
	"go": "golang:1.23-alpine", "gofmt": "golang:1.23-alpine",
	"python": "python:3.12-alpine", "python3": "python:3.12-alpine", "pip": "python:3.12-alpine",
	"pip3": "python:3.12-alpine", "poetry": "python:3.12-alpine", "uv": "python:3.12-alpine",
	"pytest": "python:3.12-alpine", "ruff": "python:3.12-alpine",
	"ruby": "ruby:3.3-alpine", "gem": "ruby:3.3-alpine", "bundle": "ruby:3.3-alpine",
	"bundler": "ruby:3.3-alpine", "rake": "ruby:3.3-alpine", "rails": "ruby:3.3-alpine",
	"java": "eclipse-temurin:21-alpine", "javac": "eclipse-temurin:21-alpine", "mvn": "eclipse-temurin:21-alpine",
	"gradle": "eclipse-temurin:21-alpine", "gradlew": "eclipse-temurin:21-alpine",
	"dotnet": "mcr.microsoft.com/dotnet/sdk:8.0", "csc": "mcr.microsoft.com/dotnet/sdk:8.0", "fsc": "mcr.microsoft.com/dotnet/sdk:8.0",
	"gcc": "gcc:14-bookworm", "g++": "gcc:14-bookworm", "clang": "gcc:14-bookworm", "clang++": "gcc:14-bookworm",
	"make": "gcc:14-bookworm", "cmake": "gcc:14-bookworm", "cc": "gcc:14-bookworm",
	"php": "php:8.3-alpine", "composer": "php:8.3-alpine",
	"elixir": "elixir:1.16-alpine", "mix": "elixir:1.16-alpine", "iex": "elixir:1.16-alpine",
	"lua": "nickblah/lua:5.4-alpine", "luajit": "nickblah/lua:5.4-alpine", "luarocks": "nickblah/lua:5.4-alpine",
	"terraform": "hashicorp/terraform:1.10",
}

var wantShells = []string{"sh", "bash", "zsh", "ash"}

var wantProjectFiles = map[string]string{
	"package.json": "node:22-alpine", "package-lock.json": "node:22-alpine", "yarn.lock": "node:22-alpine",
	"pnpm-lock.yaml": "node:22-alpine", "bun.lockb": "node:22-alpine",
	"Cargo.toml": "rust:1.85-alpine", "Cargo.lock": "rust:1.85-alpine",
	"go.mod": "golang:1.23-alpine", "go.sum": "golang:1.23-alpine",
	"pyproject.toml": "python:3.12-alpine", "requirements.txt": "python:3.12-alpine", "setup.py": "python:3.12-alpine",
	"setup.cfg": "python:3.12-alpine", "Pipfile": "python:3.12-alpine", "poetry.lock": "python:3.12-alpine",
	"uv.lock": "python:3.12-alpine",
	"Gemfile": "ruby:3.3-alpine", "Gemfile.lock": "ruby:3.3-alpine", "foo.gemspec": "ruby:3.3-alpine",
	"pom.xml": "eclipse-temurin:21-alpine", "build.gradle": "eclipse-temurin:21-alpine",
	"build.gradle.kts": "eclipse-temurin:21-alpine", "settings.gradle": "eclipse-temurin:21-alpine",
	"Main.kt":    "eclipse-temurin:21-alpine",
	"App.csproj": "mcr.microsoft.com/dotnet/sdk:8.0", "Lib.fsproj": "mcr.microsoft.com/dotnet/sdk:8.0",
	"All.sln": "mcr.microsoft.com/dotnet/sdk:8.0", "global.json": "mcr.microsoft.com/dotnet/sdk:8.0",
	"Makefile": "gcc:14-bookworm", "CMakeLists.txt": "gcc:14-bookworm", "configure": "gcc:14-bookworm",
	"main.c": "gcc:14-bookworm", "main.cpp": "gcc:14-bookworm", "main.h": "gcc:14-bookworm",
	"composer.json": "php:8.3-alpine", "composer.lock": "php:8.3-alpine", "index.php": "php:8.3-alpine",
	"mix.exs": "elixir:1.16-alpine", "mix.lock": "elixir:1.16-alpine",
	"build.sh": "alpine:3.20",
	"init.lua": "nickblah/lua:5.4-alpine", ".luacheckrc": "nickblah/lua:5.4-alpine",
	"main.tf": "hashicorp/terraform:1.10", "prod.tfvars": "hashicorp/terraform:1.10",
	"terraform.tfstate": "hashicorp/terraform:1.10",
}

func TestCommandTableEveryRow(t *testing.T) {
	for cmd, img := range wantCommands {
		for _, arg0 := range []string{cmd, "/usr/local/bin/" + cmd} {
			got := Image(Input{Args: []string{arg0, "x"}, Dir: t.TempDir()})
			if got.Image != img || got.Rule != RuleCommand || got.Detail != cmd {
				t.Errorf("Image(%q) = %+v, want %s by command %q", arg0, got, img, cmd)
			}
		}
	}
	for _, sh := range wantShells {
		got := Image(Input{Args: []string{sh, "-c", "true"}, Dir: t.TempDir()})
		if got != (Result{Image: "alpine:3.20", Rule: RuleCommand, Detail: sh}) {
			t.Errorf("Image(%q) = %+v, want alpine:3.20 by command", sh, got)
		}
	}
	// Nothing in the table beyond what is listed above.
	n := 0
	for _, rt := range Table() {
		n += len(rt.Commands)
	}
	if n != len(wantCommands)+len(wantShells) {
		t.Errorf("table has %d commands, want %d", n, len(wantCommands)+len(wantShells))
	}
}

func TestCommandUnknownIsDefault(t *testing.T) {
	for _, args := range [][]string{{"ls"}, {"Python3"}, {"python3.12"}, {""}, {"/"}, nil} {
		got := Image(Input{Args: args, Dir: t.TempDir()})
		if got != (Result{Image: DefaultImage, Rule: RuleDefault}) {
			t.Errorf("Image(%q) = %+v, want default", args, got)
		}
	}
}

func TestProjectFilesEveryRow(t *testing.T) {
	for file, img := range wantProjectFiles {
		dir := t.TempDir()
		touch(t, filepath.Join(dir, file), "")
		got := Image(Input{Args: []string{"ls"}, Dir: dir})
		if got.Image != img || got.Rule != RuleProject || got.Detail != file {
			t.Errorf("project file %s: got %+v, want %s", file, got, img)
		}
	}
	n := 0
	for _, rt := range Table() {
		n += len(rt.ProjectFiles)
	}
	if n != len(wantProjectFiles) {
		t.Errorf("table has %d project patterns, want %d", n, len(wantProjectFiles))
	}
}

func TestProjectFilesOrderAndSuffix(t *testing.T) {
	tests := []struct {
		name   string
		files  []string
		image  string
		detail string
	}{
		{"row order: node before python", []string{"requirements.txt", "package.json"}, "node:22-alpine", "package.json"},
		{"row order: rust before go", []string{"go.mod", "Cargo.toml"}, "rust:1.85-alpine", "Cargo.toml"},
		{"pattern order within a row", []string{"go.sum", "go.mod"}, "golang:1.23-alpine", "go.mod"},
		{"suffix is not a glob on the middle", []string{"x.tf.bak"}, "", ""},
		{"suffix picks the first name", []string{"b.tf", "a.tf"}, "hashicorp/terraform:1.10", "a.tf"},
		{"kotlin before c", []string{"main.c", "App.kt"}, "eclipse-temurin:21-alpine", "App.kt"},
		{"exact names are case-sensitive", []string{"makefile"}, "", ""},
		{"shell project", []string{"run.sh", "README.md"}, "alpine:3.20", "run.sh"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, file, ok := MatchProjectFiles(tt.files)
			if tt.image == "" {
				if ok {
					t.Fatalf("matched %s, want no match", file)
				}
				return
			}
			rt, file, _ := MatchProjectFiles(tt.files)
			if rt.Image != tt.image || file != tt.detail {
				t.Errorf("got %s (%s), want %s (%s)", rt.Image, file, tt.image, tt.detail)
			}
		})
	}
	// Subdirectories are not searched.
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	touch(t, filepath.Join(dir, "sub", "go.mod"), "")
	if _, _, ok := ProjectRuntime(dir); ok {
		t.Error("a project file in a subdirectory matched")
	}
	if _, _, ok := ProjectRuntime(filepath.Join(dir, "missing")); ok {
		t.Error("a missing directory matched")
	}
}

func TestProcfile(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		ok      bool
		process string
		image   string
	}{
		{"ruby web", "web: bundle exec rails server -p $PORT\n", true, "web", "ruby:3.3-alpine"},
		{"python worker", "worker: python manage.py runworker", true, "worker", "python:3.12-alpine"},
		{"first matching line wins", "web: ./server\nworker: node w.js\nclock: python c.py\n", true, "worker", "node:22-alpine"},
		{"comments and blanks skipped", "# web: python x\n\n   \nweb: go run .\n", true, "web", "golang:1.23-alpine"},
		{"lines without colon skipped", "python app.py\nweb: cargo run\n", true, "web", "rust:1.85-alpine"},
		{"empty command aborts", "web:\nworker: python w.py\n", false, "", ""},
		{"blank command aborts", "web:    \t\nworker: python w.py\n", false, "", ""},
		{"command path basename", "web: /usr/bin/python3 app.py", true, "web", "python:3.12-alpine"},
		{"CRLF", "web: npm start\r\n", true, "web", "node:22-alpine"},
		{"shell is a match", "web: sh -c 'x'\n", true, "web", "alpine:3.20"},
		{"no known command", "web: ./bin/server\n", false, "", ""},
		{"empty file", "", false, "", ""},
		{"colon in command", "web: python -c 'print(1)' --opt=a:b", true, "web", "python:3.12-alpine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, ok := ParseProcfile([]byte(tt.data))
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v (%+v)", ok, tt.ok, e)
			}
			if ok && (e.Process != tt.process || e.Runtime.Image != tt.image) {
				t.Errorf("got %s -> %s, want %s -> %s", e.Process, e.Runtime.Image, tt.process, tt.image)
			}
		})
	}
}

func TestPrecedence(t *testing.T) {
	// A directory where every weaker rule would match something else.
	full := t.TempDir()
	touch(t, filepath.Join(full, "go.mod"), "module x\n")
	touch(t, filepath.Join(full, "Procfile"), "web: python app.py\n")
	procOnly := t.TempDir()
	touch(t, filepath.Join(procOnly, "Procfile"), "web: bundle exec rails s\n")

	tests := []struct {
		name string
		in   Input
		want Result
	}{
		{"flag beats everything", Input{ExplicitImage: "busybox", ConfigImage: "x:1", ConfigRuntime: "node", Args: []string{"cargo"}, Dir: full},
			Result{Image: "busybox", Rule: RuleFlag, Detail: ""}},
		{"config base_image beats runtime and command", Input{ConfigImage: "x:1", ConfigRuntime: "node", Args: []string{"cargo"}, Dir: full},
			Result{Image: "x:1", Rule: RuleConfig, Detail: "base_image"}},
		{"config runtime beats command", Input{ConfigRuntime: "node", Args: []string{"cargo"}, Dir: full},
			Result{Image: "node:22-alpine", Rule: RuleConfig, Detail: "runtime = node"}},
		{"config runtime base", Input{ConfigRuntime: "base", Args: []string{"cargo"}, Dir: full},
			Result{Image: "alpine:3.20", Rule: RuleConfig, Detail: "runtime = base"}},
		{"command beats project files", Input{Args: []string{"cargo", "test"}, Dir: full},
			Result{Image: "rust:1.85-alpine", Rule: RuleCommand, Detail: "cargo"}},
		{"project files beat Procfile", Input{Args: []string{"ls"}, Dir: full},
			Result{Image: "golang:1.23-alpine", Rule: RuleProject, Detail: "go.mod"}},
		{"no command: project files", Input{Dir: full},
			Result{Image: "golang:1.23-alpine", Rule: RuleProject, Detail: "go.mod"}},
		{"Procfile beats default", Input{Args: []string{"./run"}, Dir: procOnly},
			Result{Image: "ruby:3.3-alpine", Rule: RuleProcfile, Detail: "Procfile: web"}},
		{"default", Input{Args: []string{"ls"}, Dir: t.TempDir()},
			Result{Image: "alpine:3.20", Rule: RuleDefault, Detail: ""}},
		{"shell defers to project files", Input{Args: []string{"bash", "-c", "go test"}, Dir: full},
			Result{Image: "golang:1.23-alpine", Rule: RuleProject, Detail: "go.mod"}},
		{"shell defers to Procfile", Input{Args: []string{"sh"}, Dir: procOnly},
			Result{Image: "ruby:3.3-alpine", Rule: RuleProcfile, Detail: "Procfile: web"}},
		{"shell alone is a command match", Input{Args: []string{"/bin/sh"}, Dir: t.TempDir()},
			Result{Image: "alpine:3.20", Rule: RuleCommand, Detail: "sh"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Image(tt.in); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestProcfileNotRegular(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "Procfile"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := Image(Input{Dir: dir}); got.Rule != RuleDefault {
		t.Errorf("a Procfile directory matched: %+v", got)
	}
}

func TestProcfileSizeCap(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("# padding\n", MaxProcfileSize/10+1) + "web: python x.py\n"
	touch(t, filepath.Join(dir, "Procfile"), big)
	if got := Image(Input{Dir: dir}); got.Rule != RuleDefault {
		t.Errorf("a line past the size cap was read: %+v", got)
	}
}

func TestShorthands(t *testing.T) {
	want := map[string]string{
		"python": "python:3.12-alpine", "node": "node:22-alpine", "go": "golang:1.23-alpine",
		"rust": "rust:1.85-alpine", "ruby": "ruby:3.3-alpine", "java": "eclipse-temurin:21-alpine",
		"c": "gcc:14-bookworm", "dotnet": "mcr.microsoft.com/dotnet/sdk:8.0", "base": "alpine:3.20",
	}
	for name, img := range want {
		if got, ok := RuntimeImage(name); !ok || got != img {
			t.Errorf("RuntimeImage(%q) = %q, %v; want %q", name, got, ok, img)
		}
	}
	if _, ok := RuntimeImage("cobol"); ok {
		t.Error("unknown runtime accepted")
	}
	if len(Shorthands()) != len(want) || len(RuntimeNames()) != len(want) {
		t.Errorf("shorthand table has %d rows, want %d", len(Shorthands()), len(want))
	}
}

func TestTableIsACopy(t *testing.T) {
	a := Table()
	a[0].Image = "changed"
	a[0].Commands[0] = "changed"
	if b := Table(); b[0].Image == "changed" || b[0].Commands[0] == "changed" {
		t.Error("Table returns shared state")
	}
}

func TestResultString(t *testing.T) {
	r := Image(Input{Args: []string{"python3", "x.py"}, Dir: t.TempDir()})
	if s := r.String(); s != `python:3.12-alpine  (rule: command "python3")` {
		t.Errorf("String() = %q", s)
	}
	if s := (Result{Image: "alpine:3.20", Rule: RuleDefault}).String(); s != "alpine:3.20  (rule: default)" {
		t.Errorf("String() = %q", s)
	}
}

func touch(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFallbackNote(t *testing.T) {
	for _, c := range []struct {
		image, rule string
		can         bool
	}{
		{"node:22-alpine", RuleCommand, true}, {"alpine:3.20", RuleDefault, true}, {"golang:1.23-alpine", RuleProject, true},
		{"python:3.12-alpine", RuleProcfile, true}, {"node:22-alpine", RuleFlag, false}, {"x:1", RuleConfig, false},
		{"host", RuleCommand, false}, {"host:latest", RuleDefault, false},
	} {
		if got := CanFallBack(c.image, c.rule); got != c.can {
			t.Errorf("CanFallBack(%q, %q) = %v, want %v", c.image, c.rule, got, c.can)
		}
	}
	r := Result{Image: "node:22-alpine", Rule: RuleCommand, Detail: "node", Fallback: FallbackNote("node:22-alpine")}
	got := r.String()
	if !strings.HasPrefix(got, `node:22-alpine  (rule: command "node")`+"\n") || !strings.Contains(got, "host") || !strings.Contains(got, "not cached") {
		t.Errorf("String() with a fallback note = %q", got)
	}
	r.Fallback = ""
	if got := r.String(); got != `node:22-alpine  (rule: command "node")` {
		t.Errorf("String() without a note = %q", got)
	}
}
