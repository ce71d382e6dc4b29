# memcheck_count.awk — reads one compute-sanitizer memcheck report (the
# lines of one checker's run) and prints "ERRORS NCCL OURS":
#   ERRORS  the count of its first "ERROR SUMMARY: N errors" line (a later
#           "N errors were not printed" line is not the count);
#   NCCL    the reports that are NCCL's own, told by the first host frame
#           past libcuda being in libnccl: its probing (an API error
#           cudaErrorNoKernelImageForDevice from cudaFuncGetAttributes: NCCL
#           asks for the attributes of kernels it did not build for this GPU
#           and checks the answer itself), and what it allocated and did not
#           free (NCCL 2.28 keeps 4 bytes of pinned host memory of each
#           communicator aborted by ncclCommAbort, seen on an H100);
#   OURS    ERRORS - NCCL: what the verdict goes by.
# run.sh runs compute-sanitizer with a print limit high enough that every
# report is printed, so the NCCL ones can be counted; a report that was not
# printed counts as ours.
function flush() {
    if (inblock && probe && first_lib ~ /libnccl/)
        nccl++
    inblock = 0; probe = 0; first_lib = ""
}
/^========= ERROR SUMMARY: [0-9]+ errors?$/ && !have_total {
    total = $4; have_total = 1; flush(); next
}
/^========= [^ ]/ {
    flush(); inblock = 1
    probe = (/cudaErrorNoKernelImageForDevice/ && /cudaFuncGetAttributes/) || /^========= Leaked /
    next
}
/^=========  +Host Frame:/ {
    if (inblock && first_lib == "" && $0 !~ / in libcuda\.so/)
        first_lib = $NF
    next
}
/^========= *$/ { flush(); next }
END {
    flush()
    print total + 0, nccl + 0, total - nccl
}
