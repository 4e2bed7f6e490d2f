# Sourced by the benchmarks that print the CPU they ran on (cpu_kind.sh, make_run.sh).
# cpu_line: the CPU's model name, family and model, and the flags that decide bf16's speed, on one line.
cpu_line() {
    local flags
    flags=$(grep -o -w -E 'avx512_bf16|amx_bf16|avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')
    echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs) (family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs), model $(grep -m1 -E '^model\s' /proc/cpuinfo | cut -d: -f2 | xargs)); flags: $flags"
}
