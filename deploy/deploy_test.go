// Package deploy holds the files that run 'agentkernel serve' under
// Kubernetes (helm/agentkernel) and Nomad (nomad/agentkernel.nomad.hcl).
// helm and nomad do not run here: these tests check what can be checked
// without them.
//
// The chart is checked by executing its templates with Go's text/template
// (the engine Helm uses) over the chart's own values.yaml, with the few
// template functions the chart uses (toYaml, nindent, quote) written here
// as Helm's do them and every other function absent (a template that calls
// one fails to parse), missing values an error; each output is then parsed
// as YAML and its objects checked: the kinds the chart must make, the
// server's command line against serve's own flags, the probes on /health at
// serve's port, the API key from the Secret in $AGENTKERNEL_API_KEY, the
// Role confined to the namespace. Helm's other features (_helpers.tpl,
// include, .Capabilities, lookup) are not used by the chart, so that this
// check is honest.
//
// The Nomad job is checked as text (there is no HCL parser here): the
// port, the health check, serve's arguments against its flags, the key
// from a Nomad variable into $AGENTKERNEL_API_KEY.
package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/agentkernel/agentkernel/internal/cli"
	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/config"
)

const chartDir = "helm/agentkernel"

// serveFlags is 'agentkernel serve”s flag set, from the command tree
// agentkernel-full builds.
func serveFlags(t *testing.T) *pflag.FlagSet {
	t.Helper()
	a := cli.NewApp(runcli.App{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	root := cli.NewRootCommand(a)
	c, _, err := root.Find([]string{"serve"})
	if err != nil || c.Name() != "serve" {
		t.Fatalf("no serve command: %v", err)
	}
	fs := c.Flags()
	fs.AddFlagSet(c.InheritedFlags()) // --config, --data-dir, ...
	return fs
}

// checkServeArgs checks a serve command line: "serve" first, then flags
// serve has, each with a value where it takes one; it returns the
// flags' values.
func checkServeArgs(t *testing.T, fs *pflag.FlagSet, args []string) map[string][]string {
	t.Helper()
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("command line %q does not start with serve", args)
	}
	got := map[string][]string{}
	for i := 1; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			t.Errorf("argument %q is not a flag of serve", args[i])
			continue
		}
		f := fs.Lookup(name)
		if f == nil || f.Hidden {
			t.Errorf("serve has no flag --%s", name)
			continue
		}
		if f.Value.Type() == "bool" {
			got[name] = append(got[name], "true")
			continue
		}
		if i+1 >= len(args) {
			t.Errorf("--%s has no value", name)
			continue
		}
		if err := f.Value.Set(args[i+1]); err != nil {
			t.Errorf("--%s %q: %v", name, args[i+1], err)
		}
		got[name] = append(got[name], args[i+1])
		i++
	}
	return got
}

// helmFuncs are the template functions the chart may use, as Helm
// defines them.
var helmFuncs = template.FuncMap{
	"toYaml": func(v any) (string, error) {
		b, err := yaml.Marshal(v)
		return strings.TrimSuffix(string(b), "\n"), err
	},
	"nindent": func(n int, s string) string {
		pad := strings.Repeat(" ", n)
		return "\n" + pad + strings.ReplaceAll(s, "\n", "\n"+pad)
	},
	"quote": func(v any) string { return strconv.Quote(fmt.Sprint(v)) },
}

type chartFile struct {
	APIVersion  string `yaml:"apiVersion"`
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	Type        string `yaml:"type"`
	Version     string `yaml:"version"`
	AppVersion  string `yaml:"appVersion"`
}

// render executes every template of the chart over values and returns
// the objects they make, by kind.
func render(t *testing.T, values map[string]any) map[string][]map[string]any {
	t.Helper()
	var chart chartFile
	readYAML(t, filepath.Join(chartDir, "Chart.yaml"), &chart)
	data := map[string]any{
		"Values":  values,
		"Release": map[string]any{"Name": "ak", "Namespace": "agentkernel-system", "Service": "Helm"},
		"Chart":   map[string]any{"Name": chart.Name, "Version": chart.Version, "AppVersion": chart.AppVersion},
	}
	files, _ := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	if len(files) == 0 {
		t.Fatal("the chart has no templates")
	}
	objs := map[string][]map[string]any{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := template.New(filepath.Base(f)).Option("missingkey=error").Funcs(helmFuncs).Parse(string(src))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var out bytes.Buffer
		if err := tpl.Execute(&out, data); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		dec := yaml.NewDecoder(&out)
		for {
			var o map[string]any
			err := dec.Decode(&o)
			if err != nil {
				if err.Error() == "EOF" {
					break
				}
				t.Fatalf("%s renders YAML that does not parse: %v\n%s", f, err, out.String())
			}
			if o == nil {
				continue
			}
			kind, _ := o["kind"].(string)
			if kind == "" || o["apiVersion"] == nil || dig(o, "metadata", "name") == nil {
				t.Errorf("%s: an object without apiVersion, kind or metadata.name: %v", f, o)
			}
			if ns := dig(o, "metadata", "namespace"); ns != "agentkernel-system" {
				t.Errorf("%s: %s outside the release's namespace: %v", f, kind, ns)
			}
			objs[kind] = append(objs[kind], o)
		}
	}
	return objs
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// dig is the value at path in nested maps and lists (a number is a
// list index).
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func TestChartFile(t *testing.T) {
	var c chartFile
	readYAML(t, filepath.Join(chartDir, "Chart.yaml"), &c)
	semver := regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)
	if c.APIVersion != "v2" || c.Name != "agentkernel" || c.Type != "application" || c.Description == "" ||
		!semver.MatchString(c.Version) || c.AppVersion == "" {
		t.Errorf("Chart.yaml: %+v", c)
	}
	if filepath.Base(chartDir) != c.Name {
		t.Errorf("the chart's directory is not named after it (%s)", c.Name)
	}
}

func TestChartRenders(t *testing.T) {
	var values map[string]any
	readYAML(t, filepath.Join(chartDir, "values.yaml"), &values)
	objs := render(t, values)
	for _, k := range []string{"Deployment", "Service", "ServiceAccount", "Role", "RoleBinding"} {
		if len(objs[k]) != 1 {
			t.Errorf("%d %s objects, want 1", len(objs[k]), k)
		}
	}
	if t.Failed() {
		return
	}
	fs := serveFlags(t)
	port := fs.Lookup("port").DefValue
	d := objs["Deployment"][0]
	pod := dig(d, "spec", "template", "spec")
	c := dig(pod, "containers", 0)
	var args []string
	for _, a := range dig(c, "args").([]any) {
		args = append(args, fmt.Sprint(a))
	}
	flags := checkServeArgs(t, fs, args)
	if !slices.Equal(flags["host"], []string{"0.0.0.0"}) || !slices.Equal(flags["port"], []string{port}) {
		t.Errorf("serve's --host and --port: %q", flags)
	}
	for _, h := range []string{"ak", "ak.agentkernel-system", "ak.agentkernel-system.svc"} {
		if !slices.Contains(flags["allowed-host"], h) {
			t.Errorf("the Service's name %s is not an --allowed-host: %q", h, flags["allowed-host"])
		}
	}
	if fmt.Sprint(dig(c, "ports", 0, "containerPort")) != port || dig(c, "ports", 0, "name") != "http" {
		t.Errorf("container port %v", dig(c, "ports"))
	}
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		if dig(c, probe, "httpGet", "path") != "/health" || dig(c, probe, "httpGet", "port") != "http" {
			t.Errorf("%s: %v", probe, dig(c, probe))
		}
	}
	env := dig(c, "env", 0)
	if dig(env, "name") != "AGENTKERNEL_API_KEY" || dig(env, "valueFrom", "secretKeyRef", "name") != dig(values, "apiKeySecret", "name") ||
		dig(env, "valueFrom", "secretKeyRef", "key") != dig(values, "apiKeySecret", "key") {
		t.Errorf("the API key's variable: %v", env)
	}
	if dig(c, "resources", "limits", "memory") != dig(values, "resources", "limits", "memory") {
		t.Errorf("resources: %v", dig(c, "resources"))
	}
	if _, set := pod.(map[string]any)["runtimeClassName"]; set {
		t.Error("runtimeClassName set although values.yaml leaves it empty")
	}
	sa := dig(objs["ServiceAccount"][0], "metadata", "name")
	if dig(pod, "serviceAccountName") != sa || dig(objs["RoleBinding"][0], "subjects", 0, "name") != sa ||
		dig(objs["RoleBinding"][0], "roleRef", "name") != dig(objs["Role"][0], "metadata", "name") {
		t.Error("the ServiceAccount, RoleBinding and Role do not name each other")
	}
	svc := objs["Service"][0]
	if dig(svc, "spec", "ports", 0, "targetPort") != "http" ||
		fmt.Sprint(dig(svc, "spec", "selector")) != fmt.Sprint(dig(d, "spec", "selector", "matchLabels")) {
		t.Errorf("the Service does not reach the pod: %v", dig(svc, "spec"))
	}
	// The Role: pods, their exec and logs, NetworkPolicies, the
	// records' Secrets (get, list, create, update, delete: no watch, no
	// patch, no deletecollection); no ClusterRole, nothing else, no
	// wildcard.
	want := map[string]bool{"pods": true, "pods/exec": true, "pods/log": true, "networkpolicies": true, "secrets": true,
		"agentsandboxes": true, "agentsandboxpools": true, "agentsandboxes/status": true, "agentsandboxpools/status": true}
	var secretVerbs []string
	for _, r := range dig(objs["Role"][0], "rules").([]any) {
		for _, res := range dig(r, "resources").([]any) {
			if !want[res.(string)] {
				t.Errorf("the Role grants %v", res)
			}
			if res == "secrets" {
				if g := dig(r, "apiGroups").([]any); len(g) != 1 || g[0] != "" {
					t.Errorf("secrets in API groups %v", g)
				}
				for _, v := range dig(r, "verbs").([]any) {
					secretVerbs = append(secretVerbs, v.(string))
				}
			}
		}
		for _, v := range dig(r, "verbs").([]any) {
			if v == "*" {
				t.Error("the Role grants every verb")
			}
		}
	}
	slices.Sort(secretVerbs)
	if !slices.Equal(secretVerbs, []string{"create", "delete", "get", "list", "update"}) {
		t.Errorf("the Role's verbs on secrets: %q, want get, list, create, update, delete", secretVerbs)
	}
	if len(objs["ClusterRole"])+len(objs["ClusterRoleBinding"]) > 0 {
		t.Error("the chart grants cluster-wide rights")
	}
	// serve's configuration: the file --config names, from the ConfigMap
	// mounted there, read by agentkernel's own loader.
	if !slices.Equal(flags["config"], []string{"/etc/agentkernel/config.toml"}) ||
		dig(c, "volumeMounts", 0, "mountPath") != "/etc/agentkernel" ||
		dig(pod, "volumes", 0, "configMap", "name") != dig(objs["ConfigMap"][0], "metadata", "name") {
		t.Errorf("the configuration file does not reach serve: %q %v %v", flags["config"], dig(c, "volumeMounts"), dig(pod, "volumes"))
	}
	cfg := loadChartConfig(t, objs)
	if cfg.Sandbox.Backend != "kubernetes" || cfg.Orchestrator.Namespace != "agentkernel-system" || cfg.Orchestrator.Controller != "auto" {
		t.Errorf("serve's configuration: backend %q, namespace %q, controller %q", cfg.Sandbox.Backend, cfg.Orchestrator.Namespace, cfg.Orchestrator.Controller)
	}
	// Domain lists' egress proxy: the chart's own image unless set.
	if want := fmt.Sprintf("%v:%v", dig(values, "image", "repository"), dig(values, "image", "tag")); cfg.Orchestrator.EgressImage != want {
		t.Errorf("egress_image = %q, want the chart's image %q", cfg.Orchestrator.EgressImage, want)
	}
	values["egressImage"] = "registry.example/egress:2"
	if cfg := loadChartConfig(t, render(t, values)); cfg.Orchestrator.EgressImage != "registry.example/egress:2" {
		t.Errorf("egressImage value: egress_image = %q", cfg.Orchestrator.EgressImage)
	}
	values["egressImage"] = ""

	// Values users set: a RuntimeClass, more allowed hosts, no
	// ServiceAccount of the chart's.
	values["runtimeClassName"] = "gvisor"
	values["allowedHosts"] = []any{"agentkernel.example.com"}
	values["serviceAccount"] = map[string]any{"create": false, "name": "mine"}
	objs = render(t, values)
	pod = dig(objs["Deployment"][0], "spec", "template", "spec")
	if dig(pod, "runtimeClassName") != "gvisor" || dig(pod, "serviceAccountName") != "mine" {
		t.Errorf("pod spec with values set: %v", pod)
	}
	args = nil
	for _, a := range dig(pod, "containers", 0, "args").([]any) {
		args = append(args, fmt.Sprint(a))
	}
	if flags := checkServeArgs(t, fs, args); !slices.Contains(flags["allowed-host"], "agentkernel.example.com") {
		t.Errorf("allowedHosts not passed: %q", args)
	}
	if len(objs["ServiceAccount"])+len(objs["Role"])+len(objs["RoleBinding"]) != 0 {
		t.Error("serviceAccount.create false still makes a ServiceAccount or its Role")
	}
	values["backend"] = "native"
	if cfg := loadChartConfig(t, render(t, values)); cfg.Sandbox.Backend != "native" || cfg.Orchestrator.Namespace != "" {
		t.Errorf("backend native: %q, orchestrator namespace %q", cfg.Sandbox.Backend, cfg.Orchestrator.Namespace)
	}
}

// loadChartConfig reads the chart's ConfigMap's config.toml with
// agentkernel's configuration loader (which validates it).
func loadChartConfig(t *testing.T, objs map[string][]map[string]any) *config.Config {
	t.Helper()
	if len(objs["ConfigMap"]) != 1 {
		t.Fatalf("%d ConfigMaps, want 1", len(objs["ConfigMap"]))
	}
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(fmt.Sprint(dig(objs["ConfigMap"][0], "data", "config.toml"))), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.LoadUser(config.LoadOptions{UserPath: p})
	if err != nil {
		t.Fatalf("the chart's config.toml: %v", err)
	}
	return cfg
}

// TestChartFunctions: a template that calls a function this check does
// not define (Helm's include, lookup, ...) cannot pass unchecked.
func TestChartFunctions(t *testing.T) {
	if _, err := template.New("x").Funcs(helmFuncs).Parse(`{{ include "x" . }}`); err == nil {
		t.Fatal("an undefined function parsed")
	}
}

func TestNomadJob(t *testing.T) {
	b, err := os.ReadFile("nomad/agentkernel.nomad.hcl")
	if err != nil {
		t.Fatal(err)
	}
	// Comments out: only what Nomad reads.
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if s := strings.TrimSpace(l); !strings.HasPrefix(s, "#") {
			lines = append(lines, l)
		}
	}
	job := strings.Join(lines, "\n")
	fs := serveFlags(t)
	port := fs.Lookup("port").DefValue
	if port != "18888" {
		t.Errorf("serve's default port is %s, the Nomad job's 18888", port)
	}
	must := func(what, re string) []string {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(job)
		if m == nil {
			t.Errorf("the job has no %s (%s)", what, re)
		}
		return m
	}
	must("static port "+port, `port\s+"http"\s*\{\s*static\s*=\s*`+port+`\s*\}`)
	must("http health check on /health", `check\s*\{[^}]*type\s*=\s*"http"[^}]*path\s*=\s*"/health"`)
	must("service on the http port", `service\s*\{[^{]*port\s*=\s*"http"`)
	if m := must("args", `args\s*=\s*\[([^\]]*)\]`); m != nil {
		var args []string
		for _, q := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(m[1], -1) {
			args = append(args, q[1])
		}
		flags := checkServeArgs(t, fs, args)
		if !slices.Equal(flags["host"], []string{"0.0.0.0"}) || !slices.Equal(flags["port"], []string{port}) {
			t.Errorf("serve's --host and --port: %q", flags)
		}
	}
	must("API key from a Nomad variable", `nomadVar\s+"nomad/jobs/agentkernel"\s*\}\}AGENTKERNEL_API_KEY=\{\{\s*\.api_key\s*\}\}`)
	must("the key's file as the task's environment", `destination\s*=\s*"secrets/[^"]+"\s*\n\s*env\s*=\s*true`)
	if strings.Contains(job, "--api-key ") || strings.Contains(job, `"--api-key"`) {
		t.Error("the job puts a key on serve's command line")
	}
}
