use super::*;

fn explained(endpoint: &Endpoint, body: &str) -> (String, String) {
    match problem(endpoint, body.as_bytes()) {
        Reply::Problem {
            status,
            message,
            errors,
        } => {
            assert_eq!(status, 400);
            (errors[0].path.clone(), message)
        }
        _ => panic!("not a problem"),
    }
}

/// C-MGMT-2: a wrong type names the field path and the expected type.
#[test]
fn c_mgmt_2_body_errors_name_the_field_and_the_reason() {
    let (path, message) = explained(
        &Endpoint::PatchConfig,
        r#"{"retry": {"max_attempts": "three"}}"#,
    );
    assert_eq!(path, "retry.max_attempts", "{message}");
    assert!(message.contains("invalid type: string"), "{message}");
    let (path, message) = explained(
        &Endpoint::SetEnabled { id: "a".into() },
        r#"{"enabled": "yes"}"#,
    );
    assert_eq!(path, "enabled", "{message}");
    assert!(message.contains("expected a boolean"), "{message}");
    let (path, message) = explained(&Endpoint::SetEnabled { id: "a".into() }, "{}");
    assert_eq!(path, "", "{message}");
    assert!(message.contains("missing field `enabled`"), "{message}");
    let (_, message) = explained(&Endpoint::Limit, r#"{"capacity": 1, "nope": 2}"#);
    assert!(message.contains("unknown field `nope`"), "{message}");
    let (_, message) = explained(&Endpoint::Limit, "[1]");
    assert!(message.contains("must be one JSON object"), "{message}");
}

#[test]
fn path_at_tracks_objects_and_arrays() {
    let body = br#"{"a": {"b": [1, {"c": 2}]}}"#;
    let at = body.iter().position(|&b| b == b'2').expect("2");
    assert_eq!(path_at(body, at), "a.b[1].c");
}
