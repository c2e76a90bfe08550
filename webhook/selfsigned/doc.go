// Package selfsigned gives the webhook a serving certificate on clusters
// without cert-manager: it keeps a CA and a serving certificate in a Secret
// (shared by every replica), writes them where the webhook server reads its
// certificate, and sets the caBundle of the Mutating (and Validating)
// WebhookConfiguration.
package selfsigned
