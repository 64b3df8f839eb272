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
// encodes the answer; the package holds no sandbox logic of its own.
// Routes are net/http.ServeMux method and wildcard patterns (router.go);
// before matching, the path's empty segments are dropped and dot segments
// kept from ServeMux's redirects, and every miss (unknown path or method)
// is the contract's JSON 404 `Not found`.
//
// Metrics (GET /metrics) are written in the Prometheus text exposition
// format by hand rather than with prometheus/client_golang: the handful of
// series below (requests by route and code, run latency histogram,
// sandboxes by status, pool sizes) need a map and a mutex, while
// client_golang would link protobuf, procfs and its registries into
// agentkernel-full, whose package initialisation every hand-off and every
// persistent sandbox's supervisor pays. TestMetricsParse holds the output
// to Prometheus's own parser (expfmt, in the tests only).
//
// Timeouts: the server has a header timeout and an idle timeout; body
// reads get a per-request read deadline that is lifted once the body is
// read, and ordinary routes get a per-request write deadline (both via
// http.ResponseController). Routes that run commands (/run, /run/stream,
// /batch/run, exec) have no write deadline: the command's own timeout
// bounds them, and a server-wide WriteTimeout would cut SSE streams.
package api
