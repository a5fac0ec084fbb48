package gate

import (
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// The names of what an Envoy route's metadata may tell the enforcer
// (filter_metadata: {tollgate: {...}} in deploy/envoy/envoy.yaml), each as a gateway
// route of the routes file says it. ext_authz is sent them as the route's metadata
// (route_metadata_context_namespaces: [tollgate]), the request-body ext_proc filter as
// request attributes (request_attributes, keyed by the expression that ends with the
// name).
const (
	// RouteUpstreamHost is the host the route sends to (the gateway route's upstream).
	RouteUpstreamHost = "upstream_host"
	// RouteIncludeUsage says whether the route's OpenAI chat streams are asked for
	// their usage (the gateway route's includeUsage).
	RouteIncludeUsage = "include_usage"
	// RouteDeployments maps the route's Azure OpenAI deployments to the models they
	// run (the gateway route's deployments), a struct of strings.
	RouteDeployments = "deployments"
)

// RouteUpstreamHostOf is the host a route's upstream_host value names, as
// pricecatalog.HostName gives it; "" when there is none or it is no host name.
func RouteUpstreamHostOf(v *structpb.Value) string {
	if h := pricecatalog.HostName(v.GetStringValue()); pricecatalog.ValidHost(h) {
		return h
	}
	return ""
}

// RouteDeploymentModel is the model a route's deployments value gives the Azure OpenAI
// deployment path names (requestbody.AzureDeployment), cleaned as a body's model is; ""
// when the path names none, the route declares none, or its entry is no model name.
func RouteDeploymentModel(deployments *structpb.Value, path string) string {
	name, ok := requestbody.AzureDeployment(path)
	if !ok {
		return ""
	}
	v := deployments.GetStructValue().GetFields()[name]
	return requestbody.CleanModel(strings.TrimSpace(v.GetStringValue()))
}
