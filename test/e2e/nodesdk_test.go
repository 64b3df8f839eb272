//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/contract"
	"github.com/agentkernel/agentkernel/internal/image/imagetest"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// nodeSDKVersion is the official Node SDK the test drives: the npm
// package agentkernel, whose client sends the routes and shapes of the
// SDKs' newer calls (detached commands, a sandbox by UUID, the TTL, the
// batch file write, snapshots).
const nodeSDKVersion = "0.18.1"

// nodeSDKScript calls the SDK against AK_URL and prints what each call
// answered, as one JSON object.
const nodeSDKScript = `
import { AgentKernel } from "agentkernel";
const c = new AgentKernel({ baseUrl: process.env.AK_URL, apiKey: process.env.AK_KEY });
const name = "node-sdk";
const out = {};
const firstImage = process.env.AK_FIRST_IMAGE || "host";
class Stop extends Error {}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const caught = async (f) => { try { await f(); return null; } catch (e) { return { class: e.constructor.name, message: e.message }; } };
try {
  out.created = await c.createSandbox(name, { image: firstImage });
  const info = await c.getSandbox(name);
  out.byUuid = await c.getSandboxByUuid(info.uuid);
  out.badUuid = await caught(() => c.getSandboxByUuid("not-a-uuid"));
  out.writeFiles = await c.writeFiles(name, { "/tmp/n/a.txt": "A", "/tmp/n/b.txt": "BB" });
  out.exec = await c.execInSandbox(name, ["sh", "-c", "cat /tmp/n/a.txt /tmp/n/b.txt; echo; echo $X; pwd"], { env: ["X=1"], workdir: "/tmp/n" });
  const d = await c.execDetached(name, ["sh", "-c", "echo out $X; pwd; echo err >&2; exec sleep 5151"], { env: ["X=2"], workdir: "/tmp" });
  out.detached = d;
  for (let i = 0; i < 300; i++) {
    const l = await c.detachedLogs(name, d.id, "stderr");
    if (l.stderr === "err\n") break;
    await sleep(50);
  }
  out.stdout = await c.detachedLogs(name, d.id);
  out.stderr = await c.detachedLogs(name, d.id, "stderr");
  out.status = await c.detachedStatus(name, d.id);
  out.list = await c.detachedList(name);
  out.kill = await c.detachedKill(name, d.id);
  out.after = await c.detachedStatus(name, d.id);
  out.unknown = await caught(() => c.detachedStatus(name, "0123456789abcdef"));
  out.extend = await c.extendTtl(name, { by: "1h" });
  out.noSnapshot = await caught(() => c.getSnapshot("nosuch"));
  await c.createSandbox("node-snap", { image: process.env.AK_IMAGE });
  await c.execInSandbox("node-snap", ["sh", "-c", "echo kept > /root/kept"]);
  // A backend without snapshots refuses the take: the answer says so.
  out.taken = await c.takeSnapshot({ sandbox: "node-snap", name: "nodesnap" }).catch((e) => { out.takeError = { class: e.constructor.name, message: e.message }; return null; });
  if (out.takeError) throw new Stop();
  out.snapshots = await c.listSnapshots();
  out.snapshot = await c.getSnapshot("nodesnap");
  out.restored = await c.restoreSnapshot("nodesnap");
  // The SDK has no start call: the route it documents, by hand.
  const st = await fetch(process.env.AK_URL + "/sandboxes/" + out.restored.name + "/start", { method: "POST", headers: { Authorization: "Bearer " + process.env.AK_KEY } });
  if (!st.ok) throw new Error("start of the restored sandbox: " + st.status + " " + (await st.text()));
  out.restoredFile = await c.execInSandbox(out.restored.name, ["cat", "/root/kept"]);
  out.deleted = await caught(() => c.deleteSnapshot("nodesnap"));
  out.afterDelete = await c.listSnapshots();
} catch (e) {
  if (!(e instanceof Stop)) out.error = String(e && e.stack || e);
} finally {
  // A removal that fails is told (the caller checks that nothing is
  // left); one of a sandbox never made is not an error worth telling.
  const rm = (n) => c.removeSandbox(n).catch((e) => {
    if (e.constructor.name !== "NotFoundError") (out.removeErrors = out.removeErrors || []).push(n + ": " + e.constructor.name + ": " + e.message);
  });
  await rm(name);
  await rm("node-snap");
  if (out.restored) await rm(out.restored.name);
}
console.log(JSON.stringify(out));
`

// installNodeSDK installs the SDK into a temporary directory (npm's cache
// kept under the user's cache directory, so that later runs need no
// network) and returns that directory.
func installNodeSDK(t *testing.T) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		testenv.Missing(t, "npm is not installed (the Node SDK test needs node and npm: apt-get install nodejs npm)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		testenv.Missing(t, "node is not installed (apt-get install nodejs)")
	}
	cache := os.Getenv("AGENTKERNEL_TEST_NPM_CACHE")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		cache = filepath.Join(base, "agentkernel-test", "npm")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"sdk-test","private":true,"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--prefer-offline", "--no-audit", "--no-fund", "--no-update-notifier",
		"--cache", cache, "agentkernel@"+nodeSDKVersion)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install agentkernel@%s: %v\n%s", nodeSDKVersion, err, out)
	}
	return dir
}

// TestNodeSDKNewerCalls drives the official Node SDK against a real
// serve: detached exec, status, logs and kill, a sandbox by UUID, the
// TTL's extension and the batch file write.
func TestNodeSDKNewerCalls(t *testing.T) {
	dir := installNodeSDK(t)
	s := startAPI(t, "--api-key", apiKey)
	t.Cleanup(func() { s.a.run("sandbox", "rm", "--force", "node-sdk") })
	if err := os.WriteFile(filepath.Join(dir, "sdk.mjs"), []byte(nodeSDKScript), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "sdk.mjs")
	cmd.Dir = dir
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "tools/busybox:1", testImage(t, "node-sdk"))
	cmd.Env = append(os.Environ(), "AK_URL="+s.url, "AK_KEY="+apiKey, "AK_IMAGE="+ref)
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, b)
	}
	var out nodeSDKAnswer
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("the script's answer: %v\n%s", err, b)
	}
	if out.Error != "" {
		t.Fatalf("the SDK failed: %s\n%s", out.Error, b)
	}
	for _, c := range nodeSDKCases(&out) {
		if err := c.run(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

type detached struct {
	ID       string   `json:"id"`
	Sandbox  string   `json:"sandbox"`
	Command  []string `json:"command"`
	Pid      int      `json:"pid"`
	Status   string   `json:"status"`
	ExitCode *int     `json:"exit_code"`
	Started  string   `json:"started_at"`
}
type sdkErr struct{ Class, Message string }
type nodeSDKAnswer struct {
	Error   string
	Created struct{ Name, Status, UUID string }
	ByUUID  struct {
		Name, UUID string
	} `json:"byUuid"`
	BadUUID    *sdkErr `json:"badUuid"`
	WriteFiles any     `json:"writeFiles"`
	Exec       struct{ Output string }
	Detached   detached
	Stdout     map[string]string
	Stderr     map[string]string
	Status     detached
	List       []detached
	Kill       string
	After      detached
	Unknown    *sdkErr
	Extend     struct {
		ExpiresAt *string `json:"expires_at"`
	}
	Taken        struct{ Name, Sandbox, CreatedAt string }
	TakeError    *sdkErr `json:"takeError"`
	Snapshots    []struct{ Name, Sandbox string }
	Snapshot     struct{ Name, Sandbox string }
	NoSnapshot   *sdkErr
	Restored     struct{ Name, Status string }
	RestoredFile struct{ Output string }
	Deleted      *sdkErr
	AfterDelete  []struct{ Name string }
	// RemoveErrors are the script's removals at its end that failed.
	RemoveErrors []string `json:"removeErrors"`
}

// nodeSDKCases are the checks of the script's answer, one per SDK call.
func nodeSDKCases(out *nodeSDKAnswer) []contractCase {
	d := out.Detached
	return []contractCase{
		{"createSandbox", func() error {
			if out.Created.Name != "node-sdk" || out.Created.Status != "running" {
				return fmt.Errorf("createSandbox: %+v", out.Created)
			}
			return nil
		}},
		{"getSandboxByUuid", func() error {
			if out.ByUUID.Name != "node-sdk" || out.ByUUID.UUID == "" {
				return fmt.Errorf("getSandboxByUuid: %+v", out.ByUUID)
			}
			return nil
		}},
		{"getSandboxByUuid of a malformed UUID", func() error {
			if out.BadUUID == nil || out.BadUUID.Class != "ValidationError" || out.BadUUID.Message != "Invalid sandbox UUID" {
				return fmt.Errorf("getSandboxByUuid of a malformed UUID: %+v", out.BadUUID)
			}
			return nil
		}},
		{"writeFiles", func() error {
			if out.WriteFiles != "Wrote 2 file(s)" {
				return fmt.Errorf("writeFiles: %#v", out.WriteFiles)
			}
			return nil
		}},
		{"execInSandbox with env and workdir", func() error {
			if out.Exec.Output != "ABB\n1\n/tmp/n\n" {
				return fmt.Errorf("execInSandbox with env and workdir: %q", out.Exec.Output)
			}
			return nil
		}},
		{"execDetached", func() error {
			if len(d.ID) != 16 || d.Sandbox != "node-sdk" || d.Status != "running" || d.Pid <= 0 || d.ExitCode != nil || d.Started == "" || len(d.Command) != 3 {
				return fmt.Errorf("execDetached: %+v", d)
			}
			return nil
		}},
		{"detachedLogs", func() error {
			if out.Stdout["stdout"] != "out 2\n/tmp\n" || len(out.Stdout) != 1 || out.Stderr["stderr"] != "err\n" || len(out.Stderr) != 1 {
				return fmt.Errorf("detachedLogs: %v %v", out.Stdout, out.Stderr)
			}
			return nil
		}},
		{"detachedStatus", func() error {
			if out.Status.ID != d.ID || out.Status.Status != "running" {
				return fmt.Errorf("detachedStatus: %+v", out.Status)
			}
			return nil
		}},
		{"detachedList", func() error {
			if len(out.List) != 1 || out.List[0].ID != d.ID {
				return fmt.Errorf("detachedList: %+v", out.List)
			}
			return nil
		}},
		{"detachedKill", func() error {
			if out.Kill != "Command killed" || out.After.Status != "failed" || out.After.ExitCode == nil || *out.After.ExitCode != 137 {
				return fmt.Errorf("detachedKill: %q, then %+v", out.Kill, out.After)
			}
			return nil
		}},
		{"detachedStatus of an unknown id", func() error {
			if out.Unknown == nil || out.Unknown.Class != "NotFoundError" || !strings.Contains(out.Unknown.Message, "not found") {
				return fmt.Errorf("detachedStatus of an unknown id: %+v", out.Unknown)
			}
			return nil
		}},
		{"extendTtl", func() error {
			if out.Extend.ExpiresAt == nil {
				return fmt.Errorf("extendTtl: no expires_at")
			} else if exp, err := time.Parse(time.RFC3339Nano, *out.Extend.ExpiresAt); err != nil || time.Until(exp) < 50*time.Minute {
				return fmt.Errorf("extendTtl: %s %v", *out.Extend.ExpiresAt, err)
			}
			return nil
		}},
		{"takeSnapshot", func() error {
			if out.Taken.Name != "nodesnap" || out.Taken.Sandbox != "node-snap" {
				return fmt.Errorf("takeSnapshot: %+v (%+v)", out.Taken, out.TakeError)
			}
			return nil
		}},
		{"listSnapshots and getSnapshot", func() error {
			if len(out.Snapshots) != 1 || out.Snapshots[0].Name != "nodesnap" || out.Snapshot.Name != "nodesnap" || out.Snapshot.Sandbox != "node-snap" {
				return fmt.Errorf("listSnapshots / getSnapshot: %+v %+v", out.Snapshots, out.Snapshot)
			}
			return nil
		}},
		{"getSnapshot of an unknown snapshot", func() error {
			if out.NoSnapshot == nil || out.NoSnapshot.Class != "NotFoundError" {
				return fmt.Errorf("getSnapshot of an unknown snapshot: %+v", out.NoSnapshot)
			}
			return nil
		}},
		{"restoreSnapshot", func() error {
			if out.Restored.Name == "" || out.Restored.Name == "node-snap" || out.RestoredFile.Output != "kept\n" {
				return fmt.Errorf("restoreSnapshot: %+v, then /root/kept: %q", out.Restored, out.RestoredFile.Output)
			}
			return nil
		}},
		{"deleteSnapshot", func() error {
			if out.Restored.Name == "" || out.Deleted != nil || len(out.AfterDelete) != 0 {
				return fmt.Errorf("deleteSnapshot: %+v, then %+v", out.Deleted, out.AfterDelete)
			}
			return nil
		}},
	}
}

// TestNodeSDKContract: the Node SDK script against serve on every
// backend, the backend the server's default ([sandbox] backend) and
// every sandbox made of the registry's image: each SDK call's answer
// held to native's, what a backend answers otherwise listed in
// internal/contract (suite nodesdk).
func TestNodeSDKContract(t *testing.T) {
	dir := installNodeSDK(t)
	if err := os.WriteFile(filepath.Join(dir, "sdk.mjs"), []byte(nodeSDKScript), 0o644); err != nil {
		t.Fatal(err)
	}
	contractBackends(t, func(t *testing.T, backend string) {
		a, ref := withBackend(t, backend)
		s := startServe(t, a, "listening on ", "serve", "--port", "0", "--api-key", apiKey)
		t.Cleanup(func() {
			for _, n := range []string{"node-sdk", "node-snap"} {
				s.a.run("sandbox", "rm", "--force", n)
			}
		})
		out := runNodeSDKScript(t, dir, s.url, ref)
		checkContract(t, backend, contract.SuiteNodeSDK, nodeSDKContractCases(&out))
	})
}

// runNodeSDKScript runs the SDK script (installed in dir by
// TestNodeSDKContract's way) against the server at url, every sandbox
// of the image ref, and returns its answer.
func runNodeSDKScript(t *testing.T, dir, url, ref string) nodeSDKAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "sdk.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AK_URL="+url, "AK_KEY="+apiKey, "AK_IMAGE="+ref, "AK_FIRST_IMAGE="+ref)
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, b)
	}
	var out nodeSDKAnswer
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("the script's answer: %v\n%s", err, b)
	}
	return out
}

// nodeSDKContractCases are nodeSDKCases after a first case: the script
// ran to its end.
func nodeSDKContractCases(out *nodeSDKAnswer) []contractCase {
	return append([]contractCase{{"the script runs to its end", func() error {
		if out.Error != "" {
			return fmt.Errorf("the SDK failed: %s", out.Error)
		}
		return nil
	}}}, nodeSDKCases(out)...)
}
