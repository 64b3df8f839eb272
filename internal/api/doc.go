// Package api is the HTTP face of agentkernel: `agentkernel serve`. It
// speaks the wire contract of the official agentkernel SDKs (see
// api/openapi.yaml and ../shared/API-CONTRACT.md): the
// {"success":…,"data":…|"error":…} envelope, the status codes, string data
// payloads, and Server-Sent Events for POST /run/stream.
//
// Before authentication and routing, every request passes the checks of
// guard.go, which keep web pages and other local users out: the unix
// socket peer's uid, the Host header (DNS rebinding), the Origin header
// (CORS only for allowed origins) and a JSON Content-Type for bodies.
// Connections are tagged with how they arrived (http.Server.ConnContext).
//
// Every handler decodes its request, makes one sandbox.Manager call and
// encodes the answer; the package holds no sandbox logic of its own. The
// router is a small hand-written switch over the path's non-empty
// segments, because the contract wants what net/http.ServeMux does not
// give: empty segments ignored (`/sandboxes//x`, `files//tmp/a`), auth
// before routing, and 404 `Not found` for every unknown method or path.
//
// Metrics (GET /metrics) are written in the Prometheus text exposition
// format by hand rather than with prometheus/client_golang: the handful of
// series below (requests by route and code, run latency histogram,
// sandboxes by status, pool sizes) need a map and a mutex, while
// client_golang would link protobuf and its registries into the one
// binary every `agentkernel run` starts (package inits cost start-up time).
//
// Timeouts: the server has a header timeout and an idle timeout; body
// reads get a per-request read deadline that is lifted once the body is
// read, and ordinary routes get a per-request write deadline (both via
// http.ResponseController). Routes that run commands (/run, /run/stream,
// /batch/run, exec) have no write deadline: the command's own timeout
// bounds them, and a server-wide WriteTimeout would cut SSE streams.
package api
