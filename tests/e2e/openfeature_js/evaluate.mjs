// The OpenFeature server SDK through the OFREP provider, for tests/e2e/test_ofrep_javascript.py: evaluates each
// flag of argv[2], a JSON array of {key, type, default, targetingKey} (type: boolean, string, number or object;
// no targetingKey: none in the context), and prints one line of JSON per flag: its evaluation details.
// SERVICE_URL is the service; HEADERS a JSON array of [name, value] pairs that carry the token.
import { OpenFeature } from "@openfeature/server-sdk";
import { OFREPProvider } from "@openfeature/ofrep-provider";

await OpenFeature.setProviderAndWait(
  new OFREPProvider({ baseUrl: process.env.SERVICE_URL, headers: JSON.parse(process.env.HEADERS) }),
);
const client = OpenFeature.getClient();
const getters = {
  boolean: client.getBooleanDetails,
  string: client.getStringDetails,
  number: client.getNumberDetails,
  object: client.getObjectDetails,
};
for (const { key, type, default: defaultValue, targetingKey } of JSON.parse(process.argv[2])) {
  const context = targetingKey === undefined ? {} : { targetingKey };
  console.log(JSON.stringify(await getters[type].call(client, key, defaultValue, context)));
}
