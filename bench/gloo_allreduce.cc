// gloo_allreduce.cc — Gloo's all-reduce with no Kowloon in between: N
// processes (default 2) on loopback TCP, meeting through Gloo's FileStore in
// a temporary folder, sum float32 buffers of 1 KiB .. 256 MiB (powers of 4).
// Rank 0 prints one line per size: bytes, the median time of several
// all-reduces (after a warm-up, each after a barrier), nccl-tests'
// algbw/busbw (kl_allreduce.h), and loop_us: the mean of as many run back to
// back, the way Kowloon's allreduce kernel times them. `make bench` puts these next to the same
// sizes run through Kowloon's allreduce across nodes.
//   gloo_allreduce [processes] [max_bytes]
#include "kl_allreduce.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace {

double now_s()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Timed all-reduces per size: more where they are short.
int reps_for(size_t bytes)
{
    return bytes <= (1u << 20) ? 50 : bytes <= (16u << 20) ? 10 : 5;
}

int rank_main(int rank, int size, const char *dir, size_t max_bytes)
{
    gloo::transport::tcp::attr attr("127.0.0.1");
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(std::chrono::seconds(60));
    ctx->connectFullMesh(store, dev);
    std::vector<float> buf(max_bytes / sizeof(float));
    uint32_t tag = 0;
    for (size_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
        const size_t count = bytes / sizeof(float);
        std::fill(buf.begin(), buf.begin() + (long)count, 1.0f);
        std::vector<double> times;
        for (int it = -1; it < reps_for(bytes); it++) {
            gloo::BarrierOptions b(ctx);
            b.setTag(tag++);
            gloo::barrier(b);
            gloo::AllreduceOptions o(ctx);
            o.setOutput(buf.data(), count);
            o.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
            o.setTag(tag++);
            const double t0 = now_s();
            gloo::allreduce(o);
            if (it >= 0) // the first is the warm-up
                times.push_back(now_s() - t0);
        }
        std::sort(times.begin(), times.end());
        const double t = times[times.size() / 2];
        // Then as Kowloon's allreduce kernel times it: the same number
        // back to back after one barrier, their mean.
        gloo::BarrierOptions b(ctx);
        b.setTag(tag++);
        gloo::barrier(b);
        const double l0 = now_s();
        for (int it = 0; it < reps_for(bytes); it++) {
            gloo::AllreduceOptions o(ctx);
            o.setOutput(buf.data(), count);
            o.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
            o.setTag(tag++);
            gloo::allreduce(o);
        }
        const double loop = (now_s() - l0) / reps_for(bytes);
        double algbw, busbw;
        kl__allreduce_bw((double)bytes, size, t, &algbw, &busbw);
        if (rank == 0)
            std::printf("bytes=%zu time_us=%.1f algbw_gbps=%.3f busbw_gbps=%.3f loop_us=%.1f\n", bytes, t * 1e6,
                        algbw, busbw, loop * 1e6);
    }
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    const int size = argc > 1 ? std::atoi(argv[1]) : 2;
    const size_t max_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : (size_t)256 << 20;
    if (size < 2 || size > 64 || max_bytes < 1024) {
        std::fprintf(stderr, "usage: %s [processes 2..64] [max_bytes >= 1024]\n", argv[0]);
        return 2;
    }
    char dir[] = "/tmp/kl-gloo-bench-XXXXXX";
    if (!mkdtemp(dir)) {
        std::perror("mkdtemp");
        return 1;
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    std::printf("# gloo %d processes, loopback TCP, float32 sum, median time\n", size);
    std::vector<pid_t> kids;
    for (int r = 1; r < size; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            try {
                _exit(rank_main(r, size, dir, max_bytes));
            } catch (const std::exception &e) {
                std::fprintf(stderr, "rank %d: %s\n", r, e.what());
                _exit(1);
            }
        }
        kids.push_back(pid);
    }
    int status = 0;
    try {
        status = rank_main(0, size, dir, max_bytes);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "rank 0: %s\n", e.what());
        status = 1;
    }
    for (pid_t pid : kids) {
        int st = 0;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            status = 1;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec); // a leftover temp folder is harmless
    return status;
}
