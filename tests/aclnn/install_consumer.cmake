# Installs the project to a temporary prefix, then builds and runs CANN-style
# programs against it: with find_package(mhc) + mhc::aclnn, with plain
# -I<prefix>/include -lmhc_aclnn (as C and as C++), and with CANN's own link
# line (-lascendcl -lnnopbase ... : CANN_LIBRARIES, empty when not installed);
# then the layer operators' samples (LAYER_SAMPLES, comma-separated sources,
# may be empty) with the plain line.
# Run by ctest: cmake -DBUILD_DIR= -DCONSUMER_DIR= -DCANN_PROGRAM= -DCANN_LIBRARIES= -DLAYER_SAMPLES= -DWORK_DIR=
#   -DLIBDIR= -DCC= -DCXX= -P install_consumer.cmake
foreach(var BUILD_DIR CONSUMER_DIR CANN_PROGRAM WORK_DIR LIBDIR CC CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_consumer.cmake: ${var} not set")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "$ ${ARGN}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# 1. find_package(mhc) + mhc::aclnn
run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G Ninja
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${CC} -DCMAKE_CXX_COMPILER=${CXX})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer_c)
run(${WORK_DIR}/build/consumer_cxx)
run(${WORK_DIR}/build/consumer_api)
run(${WORK_DIR}/build/consumer_api_static)

# 2. plain include and library paths, as a CANN Makefile would have them
set(link -L${prefix}/${LIBDIR} -lmhc_aclnn -Wl,-rpath,${prefix}/${LIBDIR} -lm)
run(${CC} -std=c99 -Wall -Wextra -Werror -I${prefix}/include ${CONSUMER_DIR}/consumer.c -o ${WORK_DIR}/plain_c ${link})
run(${CXX} -std=c++17 -Wall -Wextra -Werror -I${prefix}/include ${CONSUMER_DIR}/consumer.cpp -o ${WORK_DIR}/plain_cxx ${link})
run(${WORK_DIR}/plain_c)
run(${WORK_DIR}/plain_cxx)

# 3. CANN's link line: each name is a link to libmhc_aclnn in the installed lib dir.
string(REPLACE "," ";" CANN_LIBRARIES "${CANN_LIBRARIES}")  # passed comma-separated
if(CANN_LIBRARIES)
  set(cann_link -L${prefix}/${LIBDIR})
  foreach(name ${CANN_LIBRARIES})
    set(installed ${prefix}/${LIBDIR}/lib${name}.so)
    if(NOT IS_SYMLINK ${installed})
      message(FATAL_ERROR "${installed} is not installed as a link to libmhc_aclnn")
    endif()
    list(APPEND cann_link -l${name})
  endforeach()
  run(${CXX} -std=c++17 -Wall -Wextra -Werror -I${prefix}/include ${CANN_PROGRAM} -o ${WORK_DIR}/cann_line
      ${cann_link} -Wl,-rpath,${prefix}/${LIBDIR})
  run(${WORK_DIR}/cann_line)
endif()

# 4. The layer operators' samples (examples/aclnn_mhc_{sinkhorn,post,pre_sinkhorn}*.cpp)
# against the installed headers and library; each checks its own outputs. Their
# shared helpers (aclnn_sample.h) are next to them, in the source tree.
string(REPLACE "," ";" LAYER_SAMPLES "${LAYER_SAMPLES}")  # passed comma-separated
foreach(sample ${LAYER_SAMPLES})
  get_filename_component(name ${sample} NAME_WE)
  get_filename_component(sample_dir ${sample} DIRECTORY)
  run(${CXX} -std=c++17 -Wall -Wextra -Werror -I${prefix}/include -I${sample_dir} ${sample} -o ${WORK_DIR}/${name}
      ${link})
  run(${WORK_DIR}/${name})
endforeach()
