// Package awsauth signs a gateway route's requests to Amazon Bedrock with AWS Signature
// Version 4, from the AWS credentials the enforcer runs with: the environment
// (AWS_ACCESS_KEY_ID...), a shared profile, a web identity (EKS's IAM roles for service
// accounts), EKS Pod Identity or ECS's container credentials, or an EC2 instance's role.
// Bedrock also takes API keys (a bearer token, a route's plain credential), but most
// AWS accounts grant Bedrock to IAM roles, whose short-lived credentials only a
// signature can carry: the member's request comes in with their Tollgate key, and goes
// out signed by the operator's role.
//
// The credentials come from AWS's own SDK (aws-sdk-go-v2's default chain, cached and
// refreshed ExpiryWindow before they expire by its CredentialsCache); the signature is its v4
// signer's, over the request as it is sent (the body's SHA-256 included).
package awsauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/tollgate-dev/tollgate/enforcer/tokencache"
)

// DefaultService is the signing name of Bedrock Runtime (and of Bedrock's other APIs).
const DefaultService = "bedrock"

// FetchTimeout bounds one wait for credentials when none are cached (the web identity's
// STS call, the instance's metadata), as long as a token route's (tokencache).
const FetchTimeout = tokencache.DefaultTimeout

// ExpiryWindow is how long before their expiry temporary credentials (a web identity's,
// a credential process's, an instance's) are fetched again: the SDK's cache otherwise
// keeps them to their last instant (an ExpiryWindow of 0, but for container
// credentials), so a request signed then reaches Bedrock after they expired and is
// refused with ExpiredTokenException, and every request of that instant waits for the
// fetch. A minute is well under the shortest lifetime AWS gives such credentials (15
// minutes for an assumed role).
const ExpiryWindow = time.Minute

// unsignedPayload is what a signature says of a body it does not hash (one streamed
// as it came: an upload).
const unsignedPayload = "UNSIGNED-PAYLOAD"

// Signer signs requests for one region and service.
type Signer struct {
	creds   aws.CredentialsProvider
	signer  *v4.Signer
	region  string
	service string
}

// New loads the default credential chain for region (nothing is fetched yet) and
// returns the signer of service ("" is DefaultService).
func New(ctx context.Context, region, service string) (*Signer, error) {
	if region == "" {
		return nil, errors.New("a region is required (the one the upstream's endpoint serves, e.g. us-east-1)")
	}
	if service == "" {
		service = DefaultService
	}
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region), config.WithCredentialsCacheOptions(func(o *aws.CredentialsCacheOptions) {
		o.ExpiryWindow = ExpiryWindow
	}))
	if err != nil {
		return nil, fmt.Errorf("AWS configuration: %w", err)
	}
	if cfg.Credentials == nil {
		return nil, errors.New("AWS configuration: no credential provider")
	}
	return &Signer{creds: cfg.Credentials, signer: v4.NewSigner(), region: region, service: service}, nil
}

// ErrNoCredentials wraps every failure to get credentials.
var ErrNoCredentials = errors.New("awsauth: no AWS credentials")

// Sign signs req, whose body is body (nil with a body that streams: its payload is then
// unsigned), replacing any signature headers it carries. It waits for credentials
// (FetchTimeout at most) only when none valid are cached.
func (s *Signer) Sign(ctx context.Context, req *http.Request, body []byte, streamed bool) error {
	creds, err := s.retrieve(ctx)
	if err != nil {
		return err
	}
	for _, h := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256"} {
		req.Header.Del(h)
	}
	hash := unsignedPayload
	if streamed {
		req.Header.Set("X-Amz-Content-Sha256", unsignedPayload) // says so to the service, signed
	} else {
		sum := sha256.Sum256(body)
		hash = hex.EncodeToString(sum[:])
	}
	return s.signer.SignHTTP(ctx, creds, req, hash, s.service, s.region, time.Now())
}

// Warm fetches the credentials once (they are cached), for a problem to show at start.
func (s *Signer) Warm(ctx context.Context) error {
	_, err := s.retrieve(ctx)
	return err
}

// retrieve gets the credentials: the SDK's cache, or a fetch of FetchTimeout at most.
func (s *Signer) retrieve(ctx context.Context) (aws.Credentials, error) {
	ctx, cancel := context.WithTimeout(ctx, FetchTimeout)
	defer cancel()
	creds, err := s.creds.Retrieve(ctx)
	if err != nil {
		return aws.Credentials{}, fmt.Errorf("%w: %w", ErrNoCredentials, err)
	}
	return creds, nil
}

// String says what the signer signs for (for logs; no secret).
func (s *Signer) String() string {
	return fmt.Sprintf("AWS SigV4 for %s in %s, with the default credential chain", s.service, s.region)
}
