# Regenerates the size-class table into OUT and compares it with the
# committed src/sizeclass.h.
#   cmake -DPYTHON=python3 -DROOT=<source dir> -DOUT=<file> -P sizeclass_table.cmake
execute_process(COMMAND ${PYTHON} ${ROOT}/tools/gen_sizeclasses.py
  OUTPUT_FILE ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tools/gen_sizeclasses.py failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT} ${ROOT}/src/sizeclass.h
  RESULT_VARIABLE differ)
if(differ)
  find_program(DIFF diff)
  if(DIFF)
    execute_process(COMMAND ${DIFF} -u ${ROOT}/src/sizeclass.h ${OUT})
  endif()
  message(FATAL_ERROR "src/sizeclass.h is not what tools/gen_sizeclasses.py generates; "
    "regenerate it: python3 tools/gen_sizeclasses.py > src/sizeclass.h")
endif()
message(STATUS "src/sizeclass.h matches tools/gen_sizeclasses.py")
