// Translation unit of the shipped libgradcomp.so. Its exported symbols (NCCL
// entry points, ncclNetPlugin_v*) come from the plugin layer, linked
// whole-archive; plugin/export/gradcomp.map keeps everything else hidden.
