# The aclnn samples: CANN-style programs built, unchanged, against libmhc_aclnn.
# What they share is aclnn_sample.h, next to them (this directory is on their
# include path; tests/aclnn/install_consumer.cmake adds it too).
# They are run (and MhcPre's outputs compared with the C++ API) by tests/aclnn;
# the layer operators' samples check their own outputs (tests/aclnn runs them,
# test_layer_operators.cpp compares the operators with the C++ API).
set(MHC_ACLNN_LAYER_SAMPLES aclnn_mhc_sinkhorn aclnn_mhc_sinkhorn_backward aclnn_mhc_post aclnn_mhc_post_backward
    aclnn_mhc_pre_sinkhorn aclnn_mhc_pre_sinkhorn_backward CACHE INTERNAL "The layer operators' aclnn samples")
if(TARGET mhc_aclnn)
  foreach(sample aclnn_mhc_pre aclnn_mhc_pre_backward ${MHC_ACLNN_LAYER_SAMPLES})
    add_executable(${sample} ${CMAKE_CURRENT_LIST_DIR}/${sample}.cpp)
    target_include_directories(${sample} PRIVATE ${CMAKE_CURRENT_LIST_DIR})
    target_link_libraries(${sample} PRIVATE mhc::aclnn)
  endforeach()
endif()
