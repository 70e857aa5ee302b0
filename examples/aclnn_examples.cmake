# The aclnn samples: CANN-style programs built, unchanged, against libmhc_aclnn.
# They are run (and their outputs compared with the C++ API) by tests/aclnn.
if(TARGET mhc_aclnn)
  foreach(sample aclnn_mhc_pre aclnn_mhc_pre_backward)
    add_executable(${sample} ${CMAKE_CURRENT_SOURCE_DIR}/${sample}.cpp)
    target_link_libraries(${sample} PRIVATE mhc::aclnn)
  endforeach()
endif()
