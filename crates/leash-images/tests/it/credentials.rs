//! Registry credentials against a registry that wants them (htpasswd).

use std::time::Duration;

use leash_images::cosign::Trust;
use leash_images::credentials::Credentials;
use leash_images::testing::{LocalRegistry, TEST_PASSWORD, TEST_USER, public_key_pem, signing_key};
use leash_images::{Registry, RegistrySettings};

fn registry(credentials: Credentials) -> Registry {
    Registry::new(RegistrySettings {
        timeout: Duration::from_secs(10),
        credentials,
        ..RegistrySettings::default()
    })
}

/// Without credentials the registry's refusal is the error, naming the
/// image and the registry; with a Docker config's credentials for that
/// registry its image data and signatures are read and verify; another
/// registry's credentials do not apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_configs_credentials_open_a_private_registry() {
    let Some(reg) = LocalRegistry::start_with_auth() else {
        return;
    };
    let digest = reg.push("private/app:1", &[("team", "a")]).await.0;
    reg.sign("private/app:1", &signing_key(7)).await;
    let image = format!("{}/private/app:1", reg.host);

    let err = registry(Credentials::default())
        .image_data(&image)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("image {image}: registry {}", reg.host)),
        "{err}"
    );
    assert!(err.to_lowercase().contains("auth"), "{err}");

    let elsewhere = Credentials::from_docker_config(
        serde_json::json!({"auths": {"other.example": {"username": TEST_USER, "password": TEST_PASSWORD}}})
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    assert!(registry(elsewhere).image_data(&image).await.is_err());

    let config = serde_json::json!({"auths": {format!("http://{}", reg.host): {
        "auth": base64_user_password()}}});
    let credentials = Credentials::from_docker_config(config.to_string().as_bytes()).unwrap();
    let registry = registry(credentials);
    let data = registry.image_data(&image).await.unwrap();
    assert_eq!(data.digest, digest);
    let sigs = registry.signatures(&image).await.unwrap();
    assert_eq!(
        registry.verify(&image, &Trust::Keys(public_key_pem(&signing_key(7))), &sigs),
        Ok(digest)
    );
}

fn base64_user_password() -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{TEST_USER}:{TEST_PASSWORD}"))
}
