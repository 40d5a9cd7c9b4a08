# Writes a man page from a tool's --help (run as a script):
#   cmake "-DTOOL=path[;arg]" -DNAME=gradcomp-run "-DSUMMARY=one line" -DVERSION=0.1.0
#         -DOUT=gradcomp-run.1 -P help2man.cmake
# Lines of the help that are all capitals (NAME, SYNOPSIS, OPTIONS, ...)
# become sections; a help without a NAME section gets NAME from SUMMARY and
# the whole text as DESCRIPTION. The text itself stays preformatted.
execute_process(COMMAND ${TOOL} --help OUTPUT_VARIABLE help RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR help STREQUAL "")
  message(FATAL_ERROR "${TOOL} --help failed (${rc}): a man page needs it")
endif()
string(TOUPPER "${NAME}" upper)
set(page ".TH ${upper} 1 \"\" \"gradcomp ${VERSION}\" \"gradcomp\"\n")
if(NOT help MATCHES "^NAME\n")
  string(APPEND page ".SH NAME\n${NAME} \\- ${SUMMARY}\n.SH DESCRIPTION\n")
endif()
string(REPLACE "\\" "\\e" help "\n${help}")
string(REGEX REPLACE "\n([.'])" "\n\\\\&\\1" help "${help}")
string(REGEX REPLACE "\n([A-Z][A-Z ]+)\n" "\n.fi\n.SH \\1\n.nf\n" help "${help}")
string(REGEX REPLACE "^\n" "" help "${help}")
if(NOT help MATCHES "^\\.fi\n")
  set(help ".nf\n${help}")
endif()
file(WRITE ${OUT} "${page}${help}.fi\n")
