//! weir's black-box conformance suite.
//!
//! One suite that any weir adapter binary must pass, driven only through the process protocol
//! of the adapters (docs/proxy.md, "The CLI and the process protocol"): a config file in a temp
//! dir, `<bin> run --config F --public-bind 127.0.0.1:0 --management-bind 127.0.0.1:0
//! --ready-file R`, wait for R, then HTTP over real sockets to real backends in the test process;
//! signals with `kill(1)`.
//!
//! - [`backend`]: hyper test backends that record what they receive and switch behaviour at run
//!   time (healthy, status, 503-then-hang, slow headers, slow body, SSE, hold, upgrade echo,
//!   reset, close without answer, down/up).
//! - [`client`]: a hyper HTTP/1.1 client bound to a chosen local address, and a raw TCP client.
//! - [`dns`]: a DNS server answering from a table the case changes (C-DISC).
//! - [`harness`]: [`harness::Proxy`] starts and stops the binary; [`config`] builds its YAML.
//! - [`cases`]: one `pub async fn` per case, named by the contract id it checks (docs/contract.md).
//!
//! An adapter runs the whole suite with one line in an integration test:
//!
//! ```ignore
//! weir_conformance::suite!(env!("CARGO_BIN_EXE_weir"));
//! ```
//!
//! which expands to one `#[test]` per case (each on its own tokio runtime, so cargo runs them in
//! parallel). docs/conformance.md lists the cases and the contract ids they cover.

pub mod backend;
pub mod cases;
pub mod client;
pub mod config;
pub mod dns;
pub mod h2backend;
pub mod h2raw;
pub mod h2slow;
pub mod harness;
pub mod tls;
pub mod tls_backend;
pub mod util;

use std::future::Future;
use std::time::Duration;

pub use harness::Binary;

/// The longest one case may take before it fails as hung.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs one case against the binary at `bin` (or `$WEIR_CONFORMANCE_BIN`) on a fresh
/// multi-threaded tokio runtime, failing it after [`CASE_TIMEOUT`].
pub fn run_case<F, Fut>(name: &str, bin: &str, case: F)
where
    F: FnOnce(Binary) -> Fut,
    Fut: Future<Output = ()>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    // `WEIR_CONFORMANCE_BIN` runs the cases against another build of the binary (a release
    // build, to measure: docs/benchmarks.md "Reliability").
    let binary = Binary::new(std::env::var("WEIR_CONFORMANCE_BIN").unwrap_or_else(|_| bin.into()));
    rt.block_on(async move {
        if tokio::time::timeout(CASE_TIMEOUT, case(binary))
            .await
            .is_err()
        {
            panic!("case {name} did not finish within {CASE_TIMEOUT:?}");
        }
    });
    rt.shutdown_timeout(Duration::from_secs(1));
}

/// Calls `$crate::$callback! { ($args) case, case, ... }` with every case name: the one list of
/// cases.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_cases {
    ($callback:ident, $($args:tt)*) => {
        $crate::$callback! { ($($args)*)
            c_path_1_data_plane_serves_only_healthz_and_readyz,
            c_path_1_management_is_a_separate_listener,
            c_path_2_gate_before_limiter_and_probes_bypass_both,
            c_path_2_limiter_before_bulkhead_and_selection,
            c_path_3_valid_request_id_is_kept,
            c_path_3_invalid_or_missing_request_id_is_replaced,
            c_path_3_request_id_on_weir_errors,
            c_path_4_balancer_headers,
            c_path_5_path_and_query_bytes_are_kept,
            c_path_5_encoded_paths_do_not_change_route,
            c_path_6_hop_by_hop_request_headers_removed,
            c_path_6_hop_by_hop_response_headers_removed,
            c_path_7_first_bytes_before_backend_finishes,
            c_path_7_sse_streams_without_deadline,
            c_path_7_expect_continue_answered_once_not_forwarded,
            c_path_7_expect_continue_forwarded_for_a_streamed_body,
            c_path_7_early_response_relayed_while_body_is_sent,
            c_path_7_streaming_echo_is_full_duplex,
            c_path_8_upgrade_is_tunnelled_and_holds_the_slot,
            c_path_9_client_disconnect_cancels_and_is_not_a_failure,
            c_path_9_client_leaving_mid_body_cancels_upstream,
            c_path_9_stalled_request_body_is_408_not_a_backend_failure,
            c_path_9_h2_stalled_request_body_is_408,
            c_path_10_graceful_shutdown,
            c_path_10_shutdown_timeout_bounds_the_wait,
            c_path_10_sigint_exits_zero,
            c_path_10_sigterm_turns_readyz_503_at_once,
            c_path_10_listeners_accept_during_shutdown_delay,
            c_path_10_in_flight_finish_after_shutdown_delay,
            c_path_11_weir_errors_are_json,
            c_path_12_slow_headers_connection_closed,
            c_path_12_oversized_headers_get_431,
            c_path_12_ambiguous_framing_rejected,
            c_path_12_framing_guard_spans_reads_and_pipelines,
            c_path_12_host_required_once,
            c_path_12_idle_keepalive_closed,
            c_path_12_parked_connection_serves_next_requests,
            c_path_12_parked_connection_closed_after_idle_timeout,
            c_path_12_te_trailers_forwarded,
            c_path_12_malformed_chunked_request_body_is_400,
            c_path_12_upstream_status_outside_100_599_is_502,
            c_path_12_trace_is_refused_with_405,
            c_path_12_connection_cap_keeps_fds_for_probes_and_management,
            c_path_12_h2_rapid_reset_gets_goaway,
            c_path_12_h2_continuation_flood_gets_goaway,
            c_path_12_h2_settings_flood_bounded,
            c_path_12_h2_ping_flood_bounded,
            c_path_12_h2_zero_window_peer_bounded,
            c_path_12_h2_host_must_match_authority,
            c_path_12_h2_pseudo_header_in_trailers_resets_the_stream,
            c_fwd_1_untrusted_peer_is_the_client,
            c_fwd_1_trusted_chain_walked_from_the_right,
            c_fwd_2_forwarding_headers_rewritten,
            c_fwd_2_h2c_authority_is_the_inbound_host,
            c_fwd_3_malformed_chains_fall_back,
            c_fwd_3_ipv4_mapped_peer_is_unmapped,
            c_tls_1_tls12_and_tls13_handshake_and_request,
            c_tls_1_sni_picks_the_certificate,
            c_tls_1_h2_over_alpn,
            c_tls_1_tls10_and_tls11_refused,
            c_tls_2_symlinked_directory_rotation,
            c_tls_2_mismatched_pair_keeps_the_old_certificate,
            c_tls_3_proxy_protocol_sets_the_client,
            c_tls_3_malformed_proxy_header_closes,
            c_tls_3_proxy_header_then_tls_handshake,
            c_tls_3_send_proxy_protocol_to_backends,
            c_tls_3_send_proxy_protocol_names_the_listener,
            c_pool_1_backend_id_is_given,
            c_pool_1_duplicate_ids_rejected,
            c_pool_3_unavailable_backends_are_skipped,
            c_pool_4_round_robin_cycles,
            c_pool_4_round_robin_alternates_across_workers,
            c_pool_4_round_robin_starts_at_random_index,
            c_pool_4_weighted_round_robin_is_smooth,
            c_pool_4_least_request_prefers_idle_backend,
            c_pool_4_pick_first_falls_over_in_order,
            c_pool_4_consistent_hash_moves_only_departed_keys,
            c_pool_5_no_backend_is_503_at_once,
            c_pool_6_saturated_backends_skipped_not_queued,
            c_pool_6_slot_held_until_body_ends,
            c_pool_6_slot_released_after_failed_attempts,
            c_health_1_probe_path_and_first_cycle_before_ready,
            c_health_1_expected_statuses,
            c_health_1_tcp_mode,
            c_health_1_https_probe_needs_valid_tls,
            c_health_1_cycles_never_overlap_and_probes_time_out,
            c_health_1_max_concurrency_bounds_probes,
            c_health_2_thresholds,
            c_health_3_breaker_opens_and_probes_do_not_close_it,
            c_health_3_success_resets_failure_count,
            c_health_3_reopen_doubles_cooldown,
            c_health_3_cooldown_capped_at_max_cooldown,
            c_health_3_half_open_admits_one_trial,
            c_health_4_slow_start_ramps_share,
            c_health_4_no_ramp_at_start,
            c_health_5_disabled_backends_are_probed,
            c_health_6_hanging_probe_delays_no_one,
            c_disc_1_every_address_is_a_backend_and_changes_follow_within_two_intervals,
            c_disc_1_servfail_then_nxdomain_keep_the_last_good_set,
            c_disc_2_backend_host_name_moving_moves_the_traffic,
            c_out_1_backend_answering_500_is_ejected_then_returns,
            c_out_1_backend_answering_grpc_internal_is_ejected,
            c_out_2_pool_of_two_both_failing_keeps_serving,
            c_out_1_one_of_six_failing_half_is_ejected_by_success_rate,
            c_retry_1_retryable_statuses_and_methods,
            c_retry_1_other_statuses_not_retried,
            c_retry_1_methods,
            c_retry_1_transport_errors_retried,
            c_retry_1_per_try_timeout_retried,
            c_retry_1_body_must_be_replayable,
            c_retry_1_max_attempts,
            c_retry_2_never_the_same_backend,
            c_retry_3_no_token_spent_without_a_backend,
            c_retry_4_last_response_delivered_as_is,
            c_retry_5_per_try_timeout_bounds_headers_only,
            c_retry_6_hanging_503_is_not_drained,
            c_retry_7_budget_bounds_retries,
            c_retry_8_per_try_timeout_is_a_passive_failure,
            c_retry_9_streamed_post_whose_connect_was_refused_goes_to_another_backend,
            c_retry_9_post_that_failed_after_its_body_was_sent_is_not_retried,
            c_retry_9_h2c_refused_stream_goes_to_another_backend,
            c_retry_9_h2c_stream_past_goaway_goes_to_another_backend,
            c_retry_10_a_retry_waits_a_jittered_backoff,
            c_retry_11_backend_429_passes_through_not_retried_nor_a_failure,
            c_retry_11_full_bulkhead_503_carries_retry_after,
            c_retry_11_503_with_retry_after_pushes_the_backend_back,
            c_retry_11_retry_after_http_date_pushes_back_until_then,
            c_retry_11_retry_after_is_capped_at_retry_after_max,
            c_retry_11_pool_of_one_is_never_emptied,
            c_retry_11_h2c_503_with_retry_after_pushes_the_backend_back,
            c_retry_11_h2c_backend_429_passes_through_not_retried,
            c_hedge_1_slow_get_is_answered_by_the_hedge_and_the_loser_is_closed,
            c_hedge_1_post_is_never_hedged,
            c_hedge_1_budget_and_max_attempts_bound_hedges,
            c_hedge_1_mixed_pool_hedge_on_h2c_backend_wins,
            c_hedge_1_mixed_pool_h2c_first_attempt_is_hedged,
            c_hedge_1_h2c_loser_stream_is_reset_with_cancel,
            c_hedge_1_h2c_post_is_never_hedged,
            c_hedge_1_h2_client_get_is_hedged,
            c_rate_8_dry_run_counts_and_passes_then_patch_enforces,
            c_mirror_1_slow_shadow_never_delays_the_primary_and_gets_the_post,
            c_mirror_1_percent_mirrors_that_share,
            c_mirror_1_dead_mirror_pool_changes_nothing_for_the_client,
            c_mirror_1_in_flight_bound_drops_and_counts,
            c_mirror_1_body_over_the_limit_skips_the_mirror,
            c_load_1_overload_after_queue_timeout,
            c_load_1_no_wait_when_queue_timeout_zero,
            c_load_1_slot_is_free_once_the_response_is_read,
            c_load_1_queue_is_fifo,
            c_load_1_disconnected_waiter_leaves_queue,
            c_load_1_departed_holder_hands_its_slot_on,
            c_load_2_bulkhead_isolates_routes,
            c_load_3_protection_events_counted,
            c_load_4_adaptive_limit_sheds_and_keeps_latency,
            c_obs_1_admission_store_and_connection_metrics,
            c_obs_3_access_line_at_body_end_with_bytes,
            c_obs_3_refused_heads_are_logged_and_counted,
            c_obs_4_readyz_503_names_its_cause,
            c_mgmt_1_console_beyond_loopback_needs_a_protection,
            c_mgmt_1_console_bearer_token_required,
            c_rate_1_bucket_headers_and_429,
            c_rate_1_disabled_means_no_limit,
            c_rate_2_ipv4_prefix_aggregation,
            c_rate_2_keys_behind_trusted_proxy_and_ipv6_prefix,
            c_rate_4_local_store_evicts_when_full,
            fault_backend_killed_under_get_load_costs_no_errors,
            fault_backend_killed_under_post_load_bounded_errors,
            fault_all_backends_down_then_back,
            c_grpc_1_h2_client_calls_are_balanced_over_h2c_backends_with_trailers,
            c_grpc_1_http1_client_is_served_by_an_h2c_backend,
            c_grpc_1_backend_max_concurrent_streams_is_respected,
            c_grpc_1_max_conns_per_host_bounds_h2_connections,
            c_grpc_3_no_backend_is_a_trailers_only_unavailable,
            c_grpc_3_rate_limited_call_is_resource_exhausted,
            c_grpc_3_backend_unavailable_is_retried_on_another_backend,
            c_grpc_3_h2_client_streamed_call_refused_goes_to_another_backend,
            c_grpc_3_h2_client_call_refused_after_64_kib_is_not_sent_again,
            c_grpc_2_deadline_exceeded_answers_and_resets_the_backend_stream,
            c_grpc_2_client_cancel_resets_the_backend_stream,
            c_grpc_4_not_serving_backend_is_taken_out_until_serving,
            c_grpc_4_only_serving_is_healthy,
            c_grpc_4_http_probe_of_h2c_backend_goes_over_http2,
            c_grpc_4_grpc_mode_refuses_http1_backends,
            c_grpc_5_private_ca_backend_needs_tls_ca_file,
            c_grpc_5_tls_server_name_verifies_another_name,
            c_grpc_5_client_certificate_for_mutual_tls,
            c_grpc_5_h2_backend_without_alpn_h2_is_a_connect_failure,
            c_grpc_5_bad_upstream_tls_files_are_config_errors,
            c_grpc_5_reload_with_a_bad_tls_file_changes_nothing,
            c_grpc_2_access_log_and_requests_metric_carry_the_grpc_status,
            proto_ready_file_names_listeners,
            proto_invalid_config_exits_1_listing_errors,
            proto_check_config,
            proto_version,
            proto_sighup_does_not_kill,
        }
    };
}

/// Emits one `#[test]` per case.
#[doc(hidden)]
#[macro_export]
macro_rules! __emit_tests {
    (($bin:expr) $($case:ident,)*) => {
        $(
            #[test]
            fn $case() {
                $crate::run_case(stringify!($case), $bin, $crate::cases::$case);
            }
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __emit_names {
    (() $($case:ident,)*) => {
        /// Every case of the suite, by name, in suite order.
        pub const CASES: &[&str] = &[$(stringify!($case)),*];
    };
}

__with_cases!(__emit_names,);

/// Generates one `#[test]` per conformance case, each running the binary at `$bin`
/// (a `&str` path, usually `env!("CARGO_BIN_EXE_weir")`).
#[macro_export]
macro_rules! suite {
    ($bin:expr) => {
        $crate::__with_cases!(__emit_tests, $bin);
    };
}
