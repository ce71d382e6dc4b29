-- bench/submit.lua — wrk script for `POST /v1/jobs` (used by bench/run.sh).
-- Reads the request body from the file named by KL_BENCH_BODY and the API key
-- from KL_BENCH_KEY (environment, so `ps` does not show the key), and at the
-- end prints one machine-readable line that bench/run.sh parses:
--   KLWRK requests=N duration_us=N rps=F p50_us=N p90_us=N p99_us=N max_us=N
--         non2xx=N connect_err=N read_err=N write_err=N timeout_err=N
-- non2xx is wrk's own count of responses with a status of 400 or more: this
-- script defines no response() callback, which would cost wrk CPU per reply.

local path = os.getenv("KL_BENCH_BODY")
local key = os.getenv("KL_BENCH_KEY")
local f = assert(io.open(path, "rb"), "cannot open KL_BENCH_BODY")
local body = f:read("*a")
f:close()

wrk.method = "POST"
wrk.path = "/v1/jobs"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. key

function done(summary, latency, requests)
    local e = summary.errors
    local secs = summary.duration / 1e6
    io.write(string.format(
        "KLWRK requests=%d duration_us=%d rps=%.1f p50_us=%d p90_us=%d p99_us=%d max_us=%d " ..
        "non2xx=%d connect_err=%d read_err=%d write_err=%d timeout_err=%d\n",
        summary.requests, summary.duration, summary.requests / secs,
        latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
        e.status, e.connect, e.read, e.write, e.timeout))
end
