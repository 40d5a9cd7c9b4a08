// Translation unit of the installed libgradcomp-api.so, the public C API for
// programs that link it. Its exported gc* functions come from the plugin
// layer, linked whole-archive; plugin/export/gradcomp_api.map hides the rest.
