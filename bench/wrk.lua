-- bench/wrk.lua — wrk script of bench/run.sh, two modes (KL_BENCH_WRK_MODE):
--   submit  POST /v1/jobs with the body in the file KL_BENCH_BODY
--   get     GET /v1/jobs/{id}, cycling over the job ids (one a line) in the
--           file KL_BENCH_IDS, each thread from its own starting point
-- The API key comes from KL_BENCH_KEY (environment, so `ps` does not show it).
-- At the end it prints one machine-readable line that bench/klbench.py parses:
--   KLWRK requests=N duration_us=N rps=F p50_us=N p90_us=N p99_us=N max_us=N
--         non2xx=N connect_err=N read_err=N write_err=N timeout_err=N
-- non2xx is wrk's own count of responses with a status of 400 or more: this
-- script defines no response() callback, which would cost wrk CPU per reply.

local mode = os.getenv("KL_BENCH_WRK_MODE") or "submit"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("KL_BENCH_KEY")

if mode == "submit" then
    local f = assert(io.open(os.getenv("KL_BENCH_BODY"), "rb"), "cannot open KL_BENCH_BODY")
    wrk.method = "POST"
    wrk.path = "/v1/jobs"
    wrk.body = f:read("*a")
    f:close()
    wrk.headers["Content-Type"] = "application/json"
elseif mode == "get" then
    local paths, next_i = {}, 0
    for id in io.lines(os.getenv("KL_BENCH_IDS")) do
        if id ~= "" then
            paths[#paths + 1] = "/v1/jobs/" .. id
        end
    end
    assert(#paths > 0, "KL_BENCH_IDS names no job id")

    local threads = 0
    function setup(thread)
        thread:set("kl_thread_no", threads)   -- a global in that thread's state
        threads = threads + 1
    end

    function init(args)
        -- threads start far apart in the list, so they ask for different jobs
        next_i = ((kl_thread_no or 0) * 7919) % #paths
    end

    function request()
        next_i = next_i % #paths + 1
        return wrk.format("GET", paths[next_i])
    end
else
    error("KL_BENCH_WRK_MODE must be submit or get")
end

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
