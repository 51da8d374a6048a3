// nvkv-ycsb: the YCSB core workloads against an nvkv store (see cli.h for the command line and
// runner.h for how a client thread works).
#include "bench/ycsb/cli.h"

int main(int argc, char** argv) { return nvkv::ycsb::Main(argc, argv); }
